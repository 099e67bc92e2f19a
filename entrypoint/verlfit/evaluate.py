"""``verlfit eval MODEL``: accuracy of a model on a prepared split, scored as training validation scores it, with
greedy decoding.

Scoring: with ``--reward-function FILE[:NAME]`` (or the reward function a run directory's ``run.json`` records under
``reward_function``: ``{"path", "name"}``), that function, called as verl's naive reward manager calls it
(:mod:`verlfit.reward_function`); otherwise verl's own scorer for each row's ``data_source``:
``verl.utils.reward_score.default_compute_score(data_source, response, ground_truth)``, the function training
validation calls through ``NaiveRewardManager`` (``reward_manager/naive.py``); for
``openai/gsm8k`` it is ``gsm8k.compute_score`` with ``method="strict"``: 1.0 when the *last* ``#### N`` of the
response (commas and ``$`` removed) equals the ground truth as text, 0 otherwise (no ``#### N`` at all: 0). A
``data_source`` verl has no scorer for, without a reward function, is refused before anything is generated. The
summary's ``score`` says which scorer was used; ``format_rate`` (the share of responses with a ``#### N``) is given
only for rows verl scores with GSM8K's strict extraction (``openai/gsm8k`` without a reward function), else null.

Generation is HF ``generate``, greedy (``do_sample=False``, ``num_beams=1``), batched with left padding, prompts
built as verl's ``RLHFDataset`` builds them (``apply_chat_template(prompt, add_generation_prompt=True,
tokenize=False)`` then tokenized with ``add_special_tokens=False``), the same call as verl's HF rollout with
verlfit's patch 0004: no ``position_ids`` (derived from the attention mask), ``repetition_penalty=1.0`` and
``use_model_defaults=False`` so nothing comes from the checkpoint's ``generation_config.json`` but the stop
tokens (verl's ``fsdp_workers.generate_sequences`` takes ``eos_token_id`` from it too). HF generate and not
verl's own rollout: verl's rollout runs only inside its Ray/FSDP workers (a ``RayPPOTrainer`` with a worker
group), and vLLM does not run on compute capability 6.x; HF generate is the rollout the P40 profile trains with,
so the numbers are the ones validation reports (same greedy setting, same dtype and attention: the profile's,
fp32 + SDPA for p40). No evaluation library (lm-eval-harness, lighteval) is used: they score GSM8K their own
way (flexible extraction, few-shot prompts), which is not the number training reports.

Output (``--output``, default ``RUN/eval/global_step_N-DATA-SPLIT`` for a run directory or ``RUN/export/global_step_N``,
else ``eval/NAME-DATA-SPLIT``, NAME the model folder's name (``RUNNAME-global_step_N`` for an export folder) or the hub
id, DATA the data folder's name: two models, or one model on two data folders, never share a default):
``rows.jsonl`` (one line per row: ``row`` index in the split, ``index`` = extra_info.index, ``response``,
``extracted`` answer or null, ``ground_truth``, ``score``, ``response_tokens``) and ``summary.json``
(``accuracy``: the mean score, an accuracy where every score is 0 or 1 (``binary``), else printed as the mean
reward; ``format_rate`` = share of responses with a ``#### N``, ``mean_response_tokens``, ``rows``, the model and
settings); with ``--compare OTHER`` also ``compare/`` (the same for OTHER) and ``comparison.json``
(paired difference MODEL - OTHER with its confidence interval, see :func:`paired_difference`); where the reward
function printed anything (captured in its child, as train's reward check captures it), ``reward_printed.txt`` holds
all of it and ``summary.json``'s ``reward_printed`` its line count and first lines, which the summary prints.
``--compare``
naming MODEL itself is refused. The folder is checked before anything is generated and written whole at the end
under the write policy of :mod:`verlfit.output_files` (built beside the output and switched in: an earlier eval's
files never mix with the new ones); an eval stopped by a reward function that raises, or by Ctrl-C, writes the rows
scored so far with ``"partial": true``, the row it stopped at and why in ``summary.json``, and exits non-zero
(1; 130 for Ctrl-C) without a traceback.
"""

from __future__ import annotations

import shutil
import importlib.util
import inspect
import json
import math
import os
import statistics
import tempfile
import time
import dataclasses
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from verlfit import export, hub, output_files, reward_function as rewards
from verlfit.errors import VerlfitError
from verlfit.export import EXPORT_DIR, quiet_known_warnings
from verlfit.gpu import query_gpus
from verlfit.input_files import kind_of
from verlfit.model_files import inspect_model_dir
from verlfit.model_shape import check_model_config
from verlfit.profiles import load_profile, select_profile
from verlfit.reward_function import RewardFunction, call_refusal, score_value
from verlfit.run_files import CHECKPOINTS_DIR

ROWS_FILE = "rows.jsonl"
SUMMARY_FILE = "summary.json"
COMPARISON_FILE = "comparison.json"
PRINTED_FILE = "reward_printed.txt"  # what the reward function printed, whole (summarised on the terminal)
EVAL_DIR = "eval"  # RUN/eval/global_step_N-SPLIT for a run directory
DEFAULT_MAX_NEW_TOKENS = 256  # verlfit train's --max-response-length default (run_settings.TrainSettings)

# A generator turns a batch of chat prompts (lists of {"role", "content"}) into (response text, response tokens).
Generator = Callable[[Sequence[list]], list[tuple[str, int]]]


@dataclass
class RowResult:
    row: int
    index: int | None
    response: str
    extracted: str | None
    ground_truth: str
    score: float
    response_tokens: int
    scored_by: str = ""


GSM8K_SOURCE = "openai/gsm8k"  # the data_source verl scores with gsm8k.compute_score (strict extraction)
GSM8K_STRICT = "verl default_compute_score, openai/gsm8k: gsm8k strict"


@dataclass(frozen=True)
class Scorer:
    """How rows are scored: a reward function (its ``RewardFunction`` and the loaded callable), or verl's
    ``default_compute_score`` when both are None."""

    reward: object = None
    function: Callable | None = None  # a verlfit.reward_process.RewardProcess: the user's function in its child

    def close(self) -> None:
        """Stop the reward function's child process, where there is one."""
        if self.function is not None and hasattr(self.function, "close"):
            self.function.close()

    def printed(self) -> dict | None:
        """What the reward function printed so far (its child captures it: a print per call would flood the
        terminal), as ``{"lines", "first"}`` (the first lines, cut as the train check cuts them); None when nothing
        or no reward function."""
        if self.function is None or not hasattr(self.function, "printed"):
            return None
        printed = self.function.printed()
        return {"lines": printed.lines, "first": list(printed.first)} if printed.lines else None

    def save_printed(self, path: Path) -> None:
        """Write all the reward function printed to ``path``."""
        if self.function is not None and hasattr(self.function, "save_printed"):
            self.function.save_printed(path)

    def label(self, data_source: str) -> str:
        """What scored a row of ``data_source`` (e.g. ``"verl default_compute_score, lighteval/MATH"``)."""
        if self.function is not None:
            return f"reward function {self.reward}"
        return GSM8K_STRICT if data_source == GSM8K_SOURCE else f"verl default_compute_score, {data_source}"


def score_response(
    data_source: str, response: str, ground_truth: str, extra_info: dict | None = None, scorer: Scorer = Scorer()
) -> tuple[float, str | None]:
    """(the reward of ``response``, the answer GSM8K's strict extraction finds or None). The extraction is made only
    where it is what scores the row: verl's scorer on ``openai/gsm8k``; else None.

    Raises:
        VerlfitError: the reward function returns neither a number nor a dict with a numeric ``"score"``.
    """
    # lazy: imports torch; only where verl's own config or scorers are read
    from verl.utils.reward_score import default_compute_score

    # lazy: imports torch; only where verl's own config or scorers are read
    from verl.utils.reward_score.gsm8k import extract_solution

    if scorer.function is not None:
        try:
            result = scorer.function(
                data_source=data_source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info
            )
        except Exception as error:  # the user's code, in its child: raised, exited the process, or ran past the limit
            raise call_refusal(error, f"reward function {scorer.reward}") from error
        value = score_value(result)
        if value is None:
            raise VerlfitError(
                f"reward function {scorer.reward} returned {result!r}: verl needs a number, or a dict with a "
                "numeric 'score'",
                fix="return a float, or {'score': float, ...}",
                exit_code=2,
            )
        return value, None
    value = score_value(default_compute_score(data_source, response, ground_truth, extra_info))
    extracted = extract_solution(response, method="strict") if data_source == GSM8K_SOURCE else None
    return float(value), extracted


def make_scorer(
    reward_function: str | None,
    rows: list[dict],
    base: str | os.PathLike | None = None,
    split: str = "test",
    source: str | None = None,
) -> Scorer:
    """The :class:`Scorer` for ``rows`` (of ``split``, read from the file ``source``, which messages name): the reward
    function ``FILE[:NAME]`` (loaded, :func:`verlfit.reward_function.load_reward_function`, and called on every row as
    the ground truth and as an empty response, :func:`verlfit.reward_function.call_on_rows`), or verl's scorer when
    every ``data_source`` of ``rows`` is one it scores (:func:`verlfit.reward_function.verl_scores`).

    Raises:
        VerlfitError: exit status 2: the reward function does not load or fails on a row; a data_source verl cannot
            score without one.
    """

    if reward_function is not None:
        reward = (
            reward_function
            if isinstance(reward_function, rewards.RewardFunction)
            else rewards.parse_reward_function(reward_function, base)
        )
        process = rewards.load_reward_function(reward, capture_output=True)  # what it prints: Scorer.printed
        try:
            rewards.call_on_rows(
                process,
                [{**row, "_row": index, "_split": split, "_file": source} for index, row in enumerate(rows)],
                label=f"{reward.name} in {reward.path}",
            )
        except BaseException:
            process.close()
            raise
        return Scorer(reward, process)
    first = {}  # data_source -> the ground truth of its first row (verl's scorer is asked with it)
    for row in rows:
        first.setdefault(str(row["data_source"]), row["reward_model"]["ground_truth"])
    unscored = sorted(source for source, truth in first.items() if not rewards.verl_scores(source, truth))
    if unscored:
        raise VerlfitError(
            f"verl 0.4.1 has no scorer for data_source {', '.join(map(repr, unscored))}: nothing to score the "
            "responses with",
            fix="pass --reward-function FILE.py[:FUNCTION], the reward the model was trained with",
            exit_code=2,
        )
    return Scorer()


def load_rows(data_dir: str | os.PathLike, split: str = "test", limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of ``DATA_DIR/SPLIT.parquet`` as written by ``verlfit prepare-gsm8k``.

    Raises:
        VerlfitError: the file is missing or unreadable, or lacks verl's columns.
    """
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    path = Path(data_dir) / f"{split}.parquet"
    prepare = "prepare it again (verlfit prepare-data from your own files, verlfit prepare-gsm8k for GSM8K)"
    if not path.is_file():
        if not Path(data_dir).is_dir():
            raise VerlfitError(
                f"--data {data_dir} is {kind_of(data_dir).replace('missing', 'not there')}, not a folder of prepared"
                " data",
                fix="pass --data the folder verlfit prepare-data (your own task) or verlfit prepare-gsm8k wrote",
                exit_code=2,
            )
        splits = sorted(entry.stem for entry in Path(data_dir).glob("*.parquet"))
        if splits:
            raise VerlfitError(
                f"{path} does not exist: --split {split} names no file of {data_dir} (it has"
                f" {', '.join(f'{name}.parquet' for name in splits)})",
                fix=f"pass --split {' or --split '.join(splits)}",
                exit_code=2,
            )
        raise VerlfitError(
            f"{path} does not exist: {data_dir} holds no .parquet file",
            fix=f"pass --data the folder verlfit prepare-data or verlfit prepare-gsm8k wrote, or {prepare}",
            exit_code=2,
        )
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises ArrowInvalid / OSError for a damaged file
        raise VerlfitError(f"{path} is not a readable parquet file ({error})", fix=prepare, exit_code=2) from error
    missing = {"data_source", "prompt", "reward_model"} - set(table.column_names)
    if missing:
        raise VerlfitError(
            f"{path} lacks the column(s) {', '.join(sorted(missing))} of verl's schema", fix=prepare, exit_code=2
        )
    if limit is not None:
        table = table.slice(0, limit)
    return table.to_pylist()


class EvaluationStopped(Exception):
    """An eval stopped before its last row: ``results`` are the rows scored before ``row`` (0-based, in the split),
    ``reason`` says why in the user's words, ``interrupted`` whether it was Ctrl-C."""

    def __init__(self, results: list, row: int, reason: str, interrupted: bool = False):
        super().__init__(reason)
        self.results, self.row, self.reason, self.interrupted = results, row, reason, interrupted


def evaluate_rows(
    rows: list[dict], generate: Generator, batch_size: int = 16, progress=None, scorer: Scorer = Scorer()
) -> list[RowResult]:
    """Generate and score every row (with ``scorer``), ``batch_size`` prompts per ``generate`` call;
    ``progress(n_done)`` after each batch.

    Raises:
        EvaluationStopped: the scorer raised on a row (a reward function's own error, or one returning no number),
            or Ctrl-C (KeyboardInterrupt) came while generating or scoring; it carries the rows scored before.
    """
    results: list[RowResult] = []
    row_number = 0
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            row_number = start
            outputs = generate([row["prompt"] for row in batch])
            if len(outputs) != len(batch):
                raise RuntimeError(f"the generator returned {len(outputs)} responses for {len(batch)} prompts")
            for offset, (row, (text, tokens)) in enumerate(zip(batch, outputs)):
                row_number = start + offset
                truth = str(row["reward_model"]["ground_truth"])
                try:
                    score, extracted = score_response(row["data_source"], text, truth, row.get("extra_info"), scorer)
                except VerlfitError as error:
                    raise EvaluationStopped(results, row_number, error.message) from error
                except Exception as error:  # the user's reward function: any error it raises is its own
                    where = (
                        f"reward function {scorer.reward}"
                        if scorer.function is not None
                        else f"verl's scorer for {row['data_source']}"
                    )
                    reason = f"{where} raised {type(error).__name__}: {error}"
                    raise EvaluationStopped(results, row_number, reason) from error
                index = (row.get("extra_info") or {}).get("index")
                label = scorer.label(row["data_source"])
                results.append(RowResult(row_number, index, text, extracted, truth, score, tokens, label))
            if progress is not None:
                progress(len(results))
    except KeyboardInterrupt as interrupt:
        raise EvaluationStopped(results, len(results), "interrupted (Ctrl-C)", interrupted=True) from interrupt
    return results


def summarize(results: list[RowResult]) -> dict:
    """``{"rows", "accuracy", "correct", "binary", "format_rate", "mean_response_tokens", "score"}`` (rates in [0, 1],
    tokens per response). ``accuracy`` is the mean score and ``correct`` the sum of the scores: a share right where
    every score is 0 or 1 (``binary`` True); with other rewards (0.5, 2.0, -1) only the mean reward means something,
    and ``binary`` is False. ``format_rate`` is the share of GSM8K-strict-scored rows (``scored_by``
    :data:`GSM8K_STRICT`, or empty: rows
    written before the label existed were all scored so) whose
    response has a ``#### N``, None when no row is scored so; ``score`` names the scorers used (``"; "``-joined)."""
    n = len(results)
    if n == 0:
        return {"rows": 0, "accuracy": None, "correct": 0, "format_rate": None, "mean_response_tokens": None}
    correct = sum(r.score for r in results)
    strict = [
        r for r in results if r.scored_by in (GSM8K_STRICT, "")
    ]  # "": a row of an eval before the label (GSM8K strict)
    scorers = "; ".join(dict.fromkeys(r.scored_by for r in results if r.scored_by))
    return {
        "rows": n,
        "accuracy": correct / n,
        "correct": correct,
        "binary": all(r.score in (0.0, 1.0) for r in results),
        "format_rate": sum(r.extracted is not None for r in strict) / len(strict) if strict else None,
        "mean_response_tokens": sum(r.response_tokens for r in results) / n,
    } | ({"score": scorers} if scorers else {})


def paired_difference(scores: Sequence[float], other: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean of ``scores[i] - other[i]`` over the same rows with a normal-approximation confidence interval.

    The interval is mean ± z * s / sqrt(n), where s is the sample standard deviation of the per-row differences
    (each -1, 0 or 1) and z the normal quantile (``statistics.NormalDist``; 1.96 for 95 %). Pairing removes the
    between-problem variance that two independent accuracies would carry; the normal approximation is fine for
    a few hundred rows and is what a paired t-test gives at that size. Also counts the discordant rows
    (``only_model``: right only for MODEL; ``only_other``), McNemar's counts.

    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    if len(scores) != len(other) or not scores:
        raise ValueError(f"paired scores need the same rows: {len(scores)} and {len(other)}")
    diffs = [a - b for a, b in zip(scores, other)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * sd / math.sqrt(n)
    return {
        "rows": n,
        "difference": mean,
        "confidence": confidence,
        "low": mean - half,
        "high": mean + half,
        "stdev_of_differences": sd,
        "only_model": sum(d > 0 for d in diffs),
        "only_other": sum(d < 0 for d in diffs),
        "method": "normal approximation on the paired per-row differences",
    }


class HFGenerator:
    """Greedy batched HF generate of one model (see the module docstring for why and how).

    Args:
        model_path: a model directory or hub id.
        dtype: torch dtype name (the profile's: ``float32`` for p40, ``bfloat16`` for a10).
        attention: HF ``attn_implementation`` (``sdpa`` for p40).
        max_new_tokens: response budget in tokens (the run's ``--max-response-length`` to match its validation).
        device: ``"cuda"`` or ``"cpu"`` (default: cuda when available).
    """

    def __init__(
        self,
        model_path: str,
        dtype: str = "float32",
        attention: str = "sdpa",
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        device: str | None = None,
    ):
        import torch  # lazy: seconds to import; only where tensors are made

        # lazy: imports torch; only where a model or tokenizer is loaded
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
            self.model = (
                AutoModelForCausalLM.from_pretrained(
                    model_path, torch_dtype=getattr(torch, dtype), attn_implementation=attention
                )
                .to(self.device)
                .eval()
            )
        except (OSError, ValueError) as error:  # huggingface_hub's HFValidationError is a ValueError
            raise VerlfitError(
                f"cannot load the model {model_path}: {error}",
                fix="pass a model directory with config.json, weights and tokenizer, or a hub id (network or HF "
                "cache needed)",
            ) from error
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = (
                self.tokenizer.eos_token
            )  # verl's hf_tokenizer does the same (utils/tokenizer.py)
        try:
            eos = GenerationConfig.from_pretrained(model_path).eos_token_id
        except OSError:
            eos = None
        self.eos_token_id = eos if eos is not None else self.tokenizer.eos_token_id
        self.stop = set(self.eos_token_id if isinstance(self.eos_token_id, list) else [self.eos_token_id])
        self.max_new_tokens = max_new_tokens
        self.generation_config = GenerationConfig(do_sample=False, num_beams=1, repetition_penalty=1.0)

        # lazy: imports torch; only where a model or tokenizer is loaded
        from transformers.generation.utils import GenerationMixin

        self.extra = (
            {"use_model_defaults": False}
            if "use_model_defaults" in inspect.signature(GenerationMixin.generate).parameters
            else {}
        )

    def __call__(self, prompts: Sequence[list]) -> list[tuple[str, int]]:
        import torch  # lazy: seconds to import; only where tensors are made

        texts = [
            self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
            for messages in prompts
        ]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        with torch.no_grad():
            output = self.model.generate(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                generation_config=self.generation_config,
                use_cache=True,
                **self.extra,
            )
        results = []
        for sequence in output[:, batch["input_ids"].shape[1] :].tolist():
            length = next(
                (i + 1 for i, token in enumerate(sequence) if token in self.stop), len(sequence)
            )  # through the first stop token, as verl's response mask
            results.append((self.tokenizer.decode(sequence[:length], skip_special_tokens=True), length))
        return results


def check_loadable(
    path: str, what: str, name: str, response_tokens: tuple[str, int] | None = None, rows: Sequence[dict] = ()
) -> None:
    """Check a local model directory's files as ``verlfit doctor`` does (:func:`verlfit.model_files.inspect_model_dir`:
    config, weights whose safetensors headers read and cover each file, tokenizer) and its config.json as ``verlfit
    plan`` does (:func:`verlfit.model_shape.check_model_config`: sizes, model_type), then load the tokenizer and
    config of the model at ``path`` (no weights: seconds), so that a model that will not load fails before any other
    is scored. With ``response_tokens`` (where the budget came from, the budget in tokens): the longest prompt of
    ``rows`` (chat template and generation prompt, in the model's tokens) plus the budget must fit in the model's
    context (``max_position_embeddings`` of its config); past it a model's positions are untrained, and generate
    would run for as long as the budget allows.

    Raises:
        VerlfitError: a weights file cut short or missing, a config.json plan refuses (exit status 2), or the
            tokenizer or config does not load, naming ``what name``; a budget past the context (exit status 2),
            naming both numbers and the largest budget that fits.
    """
    from transformers import AutoConfig, AutoTokenizer  # lazy: imports torch; only where a model or tokenizer is loaded

    if Path(path).is_dir():
        try:
            inspect_model_dir(path)
        except VerlfitError as error:
            # train's words
            fix = (
                (error.fix or "")
                .replace("pass --model a complete", f"pass {what} a complete")
                .replace("point --model at", f"point {what} at")
            )
            raise VerlfitError(f"{what} {name}: {error.message}", fix=fix or None, exit_code=error.exit_code) from error
        try:
            check_model_config(path, f"{what} {name}")  # plan's and train's refusals: the sizes, the model_type
        except VerlfitError as error:
            fix = (error.fix or "").replace("pass --model ", f"pass {what} ")
            raise VerlfitError(error.message, fix=fix or None, exit_code=error.exit_code) from error

    loaded = {}
    for part, load in (("config", AutoConfig.from_pretrained), ("tokenizer", AutoTokenizer.from_pretrained)):
        try:
            loaded[part] = load(path)
        except (OSError, ValueError) as error:
            raise VerlfitError(
                f"{what} {name}: cannot load its {part} from {path}: {error}",
                fix="pass a model directory with config.json, weights and tokenizer files (what verlfit export "
                "writes), or a hub id",
            ) from error
    context = getattr(loaded["config"], "max_position_embeddings", None)
    if response_tokens is None or not isinstance(context, int):
        return
    budget, tokens = response_tokens
    prompt = max(
        (
            len(loaded["tokenizer"].apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=True))
            for row in rows
        ),
        default=0,
    )
    if prompt + tokens > context:
        raise VerlfitError(
            f"{budget} {tokens:,} and the longest prompt's {prompt:,} tokens do not fit in {what} {name}'s context of "
            f"{context:,} tokens (max_position_embeddings in its config.json): past it the model's positions are "
            "untrained, and each batch would generate for as long as the budget allows",
            fix=f"pass --max-new-tokens {max(context - prompt, 1)} or less (the run's validation used its "
            "--max-response-length)",
            exit_code=2,
        )


def same_model(model: str, other: str) -> bool:
    """Whether ``model`` and ``other`` name the same thing: the same resolved path (symlinks and ``./`` followed),
    or the same hub id."""
    if os.path.exists(model) or os.path.exists(other):
        return os.path.realpath(model) == os.path.realpath(other)
    return model == other


def write_results(out: Path, results: list[RowResult], summary: dict) -> None:
    """``out/rows.jsonl`` and ``out/summary.json`` into ``out``, the folder being built
    (:func:`verlfit.output_files.write_folder` switches it in whole)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(asdict(result), ensure_ascii=False) + "\n" for result in results)
    (out / ROWS_FILE).write_text("".join(lines), encoding="utf-8")
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


@dataclass
class ResolvedModel:
    path: str  # what from_pretrained loads
    label: str  # for output names
    run_dir: Path | None = None
    step: int | None = None
    run_info: dict | None = None


def resolve_model(model: str, workdir: Path, export_now: bool = True) -> ResolvedModel:
    """A model directory or hub id as given; a run directory (it has ``checkpoints/``): its newest complete
    checkpoint, exported into ``workdir`` (a temporary directory the caller removes; with ``export_now`` False only
    found, its ``path`` empty until :func:`export_checkpoint`). ``RUN/export/global_step_N`` (verlfit export's default
    output) counts as step N of RUN, so its eval is written under ``RUN/eval``.

    Raises:
        VerlfitError: from :func:`verlfit.export.find_checkpoint` for a run without a complete checkpoint.
    """
    path = Path(model)
    if path.is_dir() and (path / CHECKPOINTS_DIR).is_dir() and not (path / "config.json").is_file():
        checkpoint = export.find_checkpoint(path, "latest")
        resolved = ResolvedModel("", f"global_step_{checkpoint.step}", path, checkpoint.step, export.recorded_run(path))
        return export_checkpoint(resolved, workdir) if export_now else resolved
    if path.exists() and not (path / "config.json").is_file():
        raise VerlfitError(
            f"{model} is neither a model directory (no config.json) nor a run directory (no checkpoints/)",
            fix="pass a model directory, a hub id or a run directory made by verlfit train",
            exit_code=2,
        )
    run_dir = path.parent.parent
    if (
        path.parent.name == EXPORT_DIR
        and (run_dir / CHECKPOINTS_DIR).is_dir()
        and path.name.startswith("global_step_")
        and path.name[12:].isdigit()
    ):
        # a checkpoint verlfit export wrote to its default place: the eval belongs to the run (RUN/eval/...)

        return ResolvedModel(model, path.name, run_dir, int(path.name[12:]), export.recorded_run(run_dir))
    if path.exists():
        real = Path(os.path.realpath(path))
        label = f"{real.parent.parent.name}-{real.name}" if real.parent.name == EXPORT_DIR else real.name
        return ResolvedModel(model, label)
    return ResolvedModel(model, model.replace("/", "--"))  # a hub id


def export_checkpoint(model: ResolvedModel, workdir: Path) -> ResolvedModel:
    """``model`` (a run's checkpoint found by :func:`resolve_model`) with its checkpoint exported into ``workdir``;
    any other model as it is.

    Raises:
        VerlfitError: what :func:`verlfit.export.export` raises (a damaged shard).
    """
    if model.path or model.run_dir is None:
        return model

    result = export.export(model.run_dir, model.step, output=workdir / "model")
    return dataclasses.replace(model, path=str(result.output))


def resolve_settings(model: ResolvedModel, profile_name: str | None, gpu_detect=None) -> tuple[str, str, str]:
    """(dtype, attention, where they came from): the run's profile for a run directory, else ``--profile``, else
    the visible GPU's profile, else fp32 + SDPA on the CPU."""

    if profile_name is None and model.run_info and isinstance(model.run_info.get("profile"), str):
        profile = load_profile(model.run_info["profile"])
        attention = (model.run_info.get("settings") or {}).get("attention") or profile.attention
        return profile.dtype, attention, f"the run's profile {profile.name}"
    if profile_name is not None and profile_name != "auto":
        profile = load_profile(profile_name)
        return profile.dtype, profile.attention, f"--profile {profile.name}"

    report = (gpu_detect or query_gpus)()
    if report.gpus:
        profile = select_profile("auto", report.gpus[0])
        return profile.dtype, profile.attention, f"profile {profile.name} for {report.gpus[0].name}"
    return "float32", "sdpa", "no GPU: fp32 + SDPA on the CPU"


def usable_attention(dtype: str, attention: str, why: str) -> tuple[str, str, str]:
    """(dtype, attention, why) with FlashAttention-2 replaced by SDPA where it cannot run: without a CUDA GPU, or
    without the ``flash_attn`` package (transformers raises ImportError for ``attn_implementation="flash_attention_2"``
    then). SDPA computes the same attention (exact up to floating-point summation order), so the scores are
    comparable; ``why`` says so."""
    if attention != "flash_attention_2":
        return dtype, attention, why

    import torch  # lazy: seconds to import; only where tensors are made

    missing = (
        "no CUDA GPU here"
        if not torch.cuda.is_available()
        else "the flash_attn package is not installed"
        if importlib.util.find_spec("flash_attn") is None
        else None
    )
    if missing is None:
        return dtype, attention, why
    return dtype, "sdpa", f"{why}, with SDPA for its flash_attention_2 ({missing}; the same attention, another kernel)"


def default_output(model: ResolvedModel, data: str | os.PathLike, split: str) -> Path:
    """Where an eval goes without ``--output``: ``RUN/eval/LABEL-DATA-SPLIT`` for a run's checkpoint, else
    ``eval/LABEL-DATA-SPLIT`` in the current directory; LABEL names the model (its step, its folder, its run's folder
    and step for an export, or its hub id) and DATA the data folder, so that two models, or one model on two data
    folders, land in different folders."""
    data_name = Path(os.path.realpath(data)).name or "data"
    name = f"{model.label}-{data_name}-{split}"
    return (model.run_dir / EVAL_DIR / name) if model.run_dir is not None else Path(EVAL_DIR) / name


def _progress_bar(total: int, description: str):
    from rich.progress import (  # lazy: only for the live progress display on a terminal
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


def run_eval(
    model: str,
    data: str,
    split: str = "test",
    limit: int | None = None,
    batch_size: int = 16,
    output: str | None = None,
    compare: str | None = None,
    profile: str | None = None,
    max_new_tokens: int | None = None,
    make_generator=HFGenerator,
    preflight: bool = True,
    reward_function: str | None = None,
    force: bool = False,
) -> dict:
    """Evaluate ``model`` (and ``compare``) on the same rows; write the files (module docstring); return the summary
    (with ``"comparison"`` when ``compare`` is given). ``force``: replace what verlfit wrote at the output before
    (an eval of another model or data); a re-run of the same eval replaces its own output without it.

    Before any row is scored: both models are found (:func:`verlfit.hub.require_model_source`: a path that does
    not exist, or a hub id that is neither a local directory nor reachable, fails in seconds), run directories are
    exported, the output is checked (:func:`verlfit.output_files.check_output`) and its parent created and checked
    writable, and (``preflight``) both models' config and tokenizer are loaded. ``preflight=False`` skips the finding
    and loading (for a ``make_generator`` that loads nothing, in tests).

    ``reward_function`` (``FILE[:NAME]``) scores the rows; without it, the one a run directory's ``run.json`` records
    (``reward_function``: ``{"path", "name"}``), else verl's scorer (:func:`make_scorer`, checked before generating).

    Raises:
        VerlfitError: the data (:func:`load_rows`), a model, ``compare``, the scorer (:func:`make_scorer`) or the
            output as above; an eval stopped mid-way (a reward function raising on a row, Ctrl-C: exit status 130),
            after writing the rows scored so far, marked partial.
    """

    with quiet_known_warnings():
        return _run_eval(
            model,
            data,
            split,
            limit,
            batch_size,
            output,
            compare,
            profile,
            max_new_tokens,
            make_generator,
            preflight,
            reward_function,
            force,
        )


def _run_eval(
    model,
    data,
    split,
    limit,
    batch_size,
    output,
    compare,
    profile,
    max_new_tokens,
    make_generator,
    preflight,
    reward_function=None,
    force=False,
) -> dict:

    if compare is not None and same_model(model, compare):
        raise VerlfitError(
            f"--compare {compare} is the same model as MODEL {model} ({os.path.realpath(compare)}): the difference "
            "would be 0 by construction",
            fix="pass --compare another model (for example the base model the run trained from)",
            exit_code=2,
        )
    rows = load_rows(data, split, limit)
    if not rows:
        raise VerlfitError(f"{Path(data) / f'{split}.parquet'} has no rows", fix="prepare the data again", exit_code=2)
    source = str(Path(data) / f"{split}.parquet")
    # checked on every row before anything else; the reward function's child process lives until the end (finally)
    scorer = make_scorer(reward_function, rows, split=split, source=source) if reward_function is not None else None
    named = [(model, "MODEL")] + ([(compare, "--compare")] if compare is not None else [])
    try:
        if preflight:
            for name, what in named:
                hub.require_model_source(name, what, os.environ)
        work = Path(tempfile.mkdtemp(prefix="verlfit-eval-"))
    except BaseException:
        if scorer is not None:
            scorer.close()
        raise
    created: list[Path] = []
    try:
        resolved = resolve_model(model, work / "model", export_now=False)
        out = Path(output) if output is not None else default_output(resolved, data, split)
        inputs = [Path(data) / f"{split}.parquet", model] + ([compare] if compare is not None else [])
        reads = [("MODEL", model), ("--data", data)] + ([("--compare", compare)] if compare is not None else [])
        target = output_files.check_output(
            out, "verlfit eval", force=force, inputs=inputs, own_place=(EVAL_DIR, "*"), reads=reads
        )
        resolved = export_checkpoint(resolved, work / "model")  # a run's checkpoint, once the output may be written
        settings = (resolved.run_info or {}).get("settings") or {}
        if scorer is None:
            recorded = (resolved.run_info or {}).get("reward_function") or {}

            scorer = make_scorer(
                (
                    RewardFunction(Path(recorded["path"]), recorded.get("name") or "compute_score")
                    if recorded.get("path")
                    else None
                ),
                rows,
                split=split,
                source=source,
            )
        tokens = max_new_tokens or settings.get("max_response_length") or DEFAULT_MAX_NEW_TOKENS
        dtype, attention, why = usable_attention(*resolve_settings(resolved, profile))
        budget = (
            "--max-new-tokens"
            if max_new_tokens
            else "the run's --max-response-length"
            if settings.get("max_response_length")
            else "the default --max-new-tokens"
        )
        targets = [(resolved, Path("."))]
        if compare is not None:
            targets.append((resolve_model(compare, work / "compare"), Path("compare")))
        created = output_files.prepare_parent(target)
        if preflight:
            for (model_target, _where), (name, what) in zip(targets, named):
                check_loadable(model_target.path, what, name, response_tokens=(budget, tokens), rows=rows)
        written: list[tuple[Path, list[RowResult], dict]] = []  # (folder in the output, rows, summary)
        stopped = None
        for model_target, where in targets:
            generator = make_generator(model_target.path, dtype=dtype, attention=attention, max_new_tokens=tokens)
            started = time.monotonic()
            try:
                with _progress_bar(len(rows), model_target.label) as bar:
                    task = bar.add_task(f"eval {model_target.label}", total=len(rows))
                    results = evaluate_rows(
                        rows,
                        generator,
                        batch_size,
                        scorer=scorer,
                        progress=lambda done: bar.update(task, completed=done),
                    )
            except EvaluationStopped as stop:
                results, stopped = stop.results, stop
            del generator
            summary = summarize(results) | {
                "model": model if model_target is resolved else compare,
                "loaded_from": model_target.path if model_target.run_dir is None else None,
                "run_dir": str(model_target.run_dir) if model_target.run_dir else None,
                "step": model_target.step,
                "data": str(Path(data) / f"{split}.parquet"),
                "split": split,
                "limit": limit,
                "dtype": dtype,
                "attention": attention,
                "settings_from": why,
                "max_new_tokens": tokens,
                "decoding": "greedy",
                "seconds": round(time.monotonic() - started, 1),
            }
            if stopped is not None:
                summary |= {"partial": True, "stopped_at_row": stopped.row, "stopped_because": stopped.reason}
            written.append((where, results, summary))
            if stopped is not None:
                break
        comparison = None
        if compare is not None and stopped is None:
            scores = [[result.score for result in results] for _where, results, _summary in written]
            comparison = paired_difference(*scores) | {"model": written[0][2], "other": written[1][2]}

        printed = scorer.printed() if scorer is not None else None
        if printed is not None:
            written[0][2]["reward_printed"] = printed | {"file": str(out / PRINTED_FILE)}

        def build(folder: Path) -> None:
            for where, results, summary in written:
                write_results(folder / where, results, summary)
            if printed is not None:
                scorer.save_printed(folder / PRINTED_FILE)
            if comparison is not None:
                (folder / COMPARISON_FILE).write_text(json.dumps(comparison, indent=2) + "\n", encoding="utf-8")

        if stopped is not None and not any(results for _where, results, _summary in written):
            raise _stopped_error(stopped, Path(data) / f"{split}.parquet", None)
        if stopped is not None and target.replaces:
            # a stopped eval's rows never replace what an earlier eval wrote there (it may be a finished one)
            raise _stopped_error(stopped, Path(data) / f"{split}.parquet", None, kept=out)
        output_files.write_folder(target, build, created)
        if stopped is not None:
            raise _stopped_error(stopped, Path(data) / f"{split}.parquet", out)
        summary = written[0][2]
        if comparison is not None:
            summary = summary | {"comparison": comparison}
        summary["output"] = str(out)
        if target.replaces:
            summary["replaced"] = output_files.replaced_text(target)
        return summary
    except BaseException:
        output_files.remove_created(created)  # only folders this eval created, only while empty
        raise
    finally:
        if scorer is not None:
            scorer.close()
        shutil.rmtree(work, ignore_errors=True)


def _stopped_error(
    stopped: EvaluationStopped, data_file: Path, out: Path | None, kept: Path | None = None
) -> VerlfitError:
    """The error an eval stopped mid-way ends with: the row and why, where the rows scored before it went (``out``;
    None: nothing written, because no row was scored or because ``kept``, an earlier eval's output at the same place,
    is not replaced by a partial one); exit status 130 for Ctrl-C, else 1."""
    if kept is not None:
        kept_text = (
            f"; nothing written: the {len(stopped.results)} rows scored before it do not replace what an earlier eval"
            f" wrote to {kept}, which is kept"
        )
    elif out is None:
        kept_text = "; nothing written (no row was scored)"
    else:
        kept_text = (
            f"; the {len(stopped.results)} rows scored before it are written to {out} "
            f'({SUMMARY_FILE} says "partial": true)'
        )
    if stopped.interrupted:
        fix = (
            "run the eval again to score every row (it replaces the partial output)"
            if out is not None
            else "run the eval again to score every row"
        )
    else:
        fix = "fix the reward function so that it returns a number for every row, then run the eval again"
    return VerlfitError(
        f"eval stopped at row {stopped.row} of {data_file}: {stopped.reason}{kept_text}",
        fix=fix,
        exit_code=130 if stopped.interrupted else 1,
    )


def _format(summary: dict) -> str:
    return "" if summary.get("format_rate") is None else f"format {summary['format_rate']:.4f}, "


def score_text(summary: dict) -> str:
    """``"accuracy 0.7500 (6/8)"`` where every score was 0 or 1 (``summary["binary"]``, True for summaries written
    before the key existed: verl's GSM8K score is 0 or 1), else ``"mean reward 0.7500 over 8 rows"``: a reward of
    0.5 is not half a right answer."""
    if summary.get("binary", True):
        return f"accuracy {summary['accuracy']:.4f} ({summary['correct']:g}/{summary['rows']})"
    return f"mean reward {summary['accuracy']:.4f} over {summary['rows']} rows"


def describe(summary: dict) -> str:
    comparison = summary.get("comparison")
    lines = [
        f"{'model ' if comparison else ''}{summary['model']}: {score_text(summary)}, "
        f"{_format(summary)}mean response {summary['mean_response_tokens']:.1f} tokens "
        f"({summary['dtype']}, {summary['attention']}: {summary['settings_from']})"
    ]
    if comparison:
        other = comparison["other"]
        lines.append(
            f"other {other['model']}: {score_text(other)}, "
            f"{_format(other)}mean response {other['mean_response_tokens']:.1f} tokens"
        )
        lines.append(
            f"difference (model - other, same {comparison['rows']} rows): {comparison['difference']:+.4f}, "
            f"{comparison['confidence']:.0%} CI [{comparison['low']:+.4f}, {comparison['high']:+.4f}] "
            f"({comparison['method']}); right only for model: {comparison['only_model']}, "
            f"only for other: {comparison['only_other']}"
        )
    if summary.get("score"):
        lines.append(f"scored by {summary['score']}")
    printed = summary.get("reward_printed")
    if printed:
        first = ", ".join(repr(line) for line in printed["first"])
        lines.append(
            f"the reward function printed {printed['lines']} line{'' if printed['lines'] == 1 else 's'} while checked"
            f" and scoring (first {first}); all of it in {printed['file']}"
        )
    lines.append(f"written to {summary['output']}")
    if summary.get("replaced"):
        lines.append(summary["replaced"])
    return "\n".join(lines)
