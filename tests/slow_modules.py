"""The test modules marked ``slow`` (tests/conftest.py), which ``make test-fast`` leaves out."""

# The modules `make test-fast` leaves out (`-m "not slow"`): those whose tests took 9 s or more together in a
# `make test` on a 2-core machine (pytest --junitxml, 2026-12-04): they patch verl copies and run torch in
# subprocesses (tests/patches), load models (export, eval), build images' scripts (images), read datasets (gsm8k),
# draw plots (report), run the golden and data-safety sweeps through every command, or run train and plan through
# their whole CLI many times (test_train, test_plan_command). `make test` runs them all.
SLOW_MODULES = frozenset(
    {
        "tests/patches/test_model_families.py",
        "tests/patches/test_checkpoint_cpu.py",
        "tests/patches/test_frozen_base.py",
        "tests/patches/test_loss_scaling.py",
        "tests/patches/test_static_decode.py",
        "tests/patches/test_rollout_unwrap.py",
        "tests/patches/test_rollout_speed.py",
        "tests/patches/test_patch_apply.py",
        "tests/patches/test_static_decode_lora.py",
        "tests/patches/test_trim_padding.py",
        "tests/patches/test_patched_verl.py",
        "tests/patches/test_patched_verl_lora.py",
        "tests/test_export.py",
        "tests/test_evaluate.py",
        "tests/cli/test_dry_run_and_plan_output.py",
        "tests/cli/test_data_safety.py",
        "tests/images/test_image_makefile.py",
        "tests/images/test_image_dockerfiles.py",
        "tests/images/test_image_check.py",
        "tests/test_gsm8k.py",
        "tests/test_report.py",
        "tests/benchmarks/test_device_run.py",
        "tests/benchmarks/test_soak.py",
        "tests/test_bench.py",
        "tests/cli/test_train.py",
        "tests/cli/test_plan_command.py",
        "tests/test_model_shape.py",
    }
)
