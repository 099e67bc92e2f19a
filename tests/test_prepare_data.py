"""prepare-data: the user's own question/answer files as verl's five columns, bad rows named by line and column,
exact counts, the split, prompt-length filtering, and the data folder rule."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import cli, gsm8k
from verlfit.data_folder import FolderState, data_folder_state, schemas_match
from verlfit.errors import VerlfitError
from verlfit.prepare_data import prepare_data, split_indices

ROWS = [
    {"q": "Convert 2 km to m.", "a": "2000"},
    {"q": "Convert 3 m to cm.", "a": 300},
    {"q": "", "a": "1"},
    {"q": "Convert 5 kg to g.", "a": "5000"},
    {"q": "Convert 1 h to min.", "a": None},
    {"q": "Convert 7 cm to mm.", "a": "70"},
]


def write_jsonl(path: Path, rows, blank_after: int | None = None, garbage_at: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row) for row in rows]
    if garbage_at is not None:
        lines.insert(garbage_at, "{not json")
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(tmp_path, **kwargs):
    lines: list[str] = []
    arguments = (
        dict(
            data_source="my/units",
            output_dir=tmp_path / "out",
            question_column="q",
            answer_column="a",
            log=lines.append,
        )
        | kwargs
    )
    return prepare_data(**arguments), lines


def test_exact_rows_from_two_files_with_bad_rows_named_by_line_and_column(tmp_path):
    train = write_jsonl(tmp_path / "in" / "train.jsonl", ROWS, blank_after=1, garbage_at=5)
    test = write_jsonl(tmp_path / "in" / "test.jsonl", [{"q": "Convert 4 l to ml.", "a": 4000.5}])
    result, lines = run(
        tmp_path,
        train=train,
        test=test,
        system_prompt="Answer with a number.",
        prompt_template="{question} Put the answer after ####.",
    )
    assert [str(bad) for bad in result.bad] == [
        f"{train} line 4, column q: blank",
        f"{train} line 6, column a: blank",
        f"{train} line 7: not JSON (Expecting property name enclosed in double quotes, column 2)",
    ]
    assert (result.read, result.rows) == ({"train": 7, "test": 1}, {"train": 4, "test": 1})
    written = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert written[1] == {
        "data_source": "my/units",
        "prompt": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "Convert 3 m to cm. Put the answer after ####."},
        ],
        "ability": "custom",
        "reward_model": {"style": "rule", "ground_truth": "300"},
        "extra_info": {"split": "train", "index": 1, "answer": "300", "question": "Convert 3 m to cm."},
    }
    assert [row["extra_info"]["index"] for row in written] == [0, 1, 3, 6]  # position among the file's rows
    assert pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()[0]["reward_model"]["ground_truth"] == "4000.5"
    assert schemas_match(pq.read_schema(tmp_path / "out" / "train.parquet"), gsm8k.features().arrow_schema)
    assert lines[-2:] == [
        f"train: 4 rows written -> {tmp_path / 'out' / 'train.parquet'}",
        f"test: 1 rows written -> {tmp_path / 'out' / 'test.parquet'}",
    ]
    assert data_folder_state(tmp_path / "out").state is FolderState.VERLFIT_PREPARED
    assert gsm8k.is_prepared(tmp_path / "out")


def test_csv_json_and_parquet_read_the_same_rows(tmp_path):
    good = [row for row in ROWS if row["q"] and row["a"] is not None]
    (tmp_path / "rows.csv").write_text("q,a\n" + "".join(f'"{row["q"]}",{row["a"]}\n' for row in good))
    (tmp_path / "rows.json").write_text(json.dumps(good))
    pq.write_table(
        pa.Table.from_pylist([{"q": row["q"], "a": str(row["a"])} for row in good]), tmp_path / "rows.parquet"
    )
    outputs = []
    for suffix in ("csv", "json", "parquet"):
        result, _ = run(
            tmp_path, train=tmp_path / f"rows.{suffix}", test_fraction=0.25, seed=3, output_dir=tmp_path / suffix
        )
        assert result.rows == {"train": 3, "test": 1}
        outputs.append([(tmp_path / suffix / f"{split}.parquet").read_bytes() for split in ("train", "test")])
    assert outputs[0] == outputs[1] == outputs[2]


def test_csv_bad_row_is_named_by_its_line_even_after_a_quoted_newline(tmp_path):
    (tmp_path / "rows.csv").write_text('q,a\n"two\nlines",1\n"ok",\n"fine",3\n')
    result, _ = run(tmp_path, train=tmp_path / "rows.csv", test_fraction=0.5)
    assert [str(bad) for bad in result.bad] == [f"{tmp_path / 'rows.csv'} line 4, column a: blank"]


def test_split_is_seeded_and_exact():
    train, test = split_indices(10, 0.2, seed=0)
    assert (len(train), len(test)) == (8, 2) and sorted(train + test) == list(range(10))
    assert split_indices(10, 0.2, seed=0) == (train, test)
    assert split_indices(10, 0.2, seed=1) != (train, test)
    assert split_indices(3, 0.01, seed=0)[1] != []  # at least one held-out row
    with pytest.raises(VerlfitError, match="must be between 0 and 1"):
        split_indices(10, 1.0, seed=0)


def test_strict_fails_listing_the_bad_rows_and_writes_nothing(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5, strict=True)
    assert (
        caught.value.message
        == f"2 bad row(s) and --strict:\n  {train} line 3, column q: blank\n  {train} line 5, column a: blank"
    )
    assert not (tmp_path / "out").exists()


def test_missing_column_names_the_flag(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": "x", "answer": "1"}] * 2)
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5)
    # once, with the file's columns (issue 32 item 16: it was a bad-row line per row, then "check the columns")
    assert (
        caught.value.message
        == f"--question-column q: no row of {train} has that column; its columns are question, answer"
    )
    assert caught.value.fix == "pass --question-column with one of them"
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5, question_column="question")
    assert (
        caught.value.message
        == f"--answer-column a: no row of {train} has that column; its columns are question, answer"
    )


def test_never_writes_into_the_users_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.parquet").write_bytes(b"mine")
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5)
    assert caught.value.exit_code == 2
    assert caught.value.fix == f"pass --output a new folder (it is created), or move your files out of {out}"
    assert (out / "train.parquet").read_bytes() == b"mine"
    with pytest.raises(VerlfitError) as caught:  # --force replaces only what verlfit wrote (issue 32)
        run(tmp_path, train=train, test_fraction=0.5, force=True)
    assert "verlfit never replaces or deletes them, even with --force" in caught.value.message
    assert (out / "train.parquet").read_bytes() == b"mine"


def test_prompt_length_filter_uses_the_models_tokens(tmp_path, qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)
    rows = [
        {"q": "Convert 1 km to m.", "a": "1000"},
        {"q": "Convert " + "many " * 80 + "km to m.", "a": "1"},
        {"q": "Convert 2 km to m.", "a": "2000"},
    ]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", rows)  # the same rows in another file (one file for both is refused)
    lengths = [gsm8k.prompt_length(tokenizer, [{"role": "user", "content": row["q"]}]) for row in rows]
    limit = max(lengths[0], lengths[2])
    assert lengths[1] > limit
    result, lines = run(tmp_path, train=train, test=test, tokenizer=tokenizer, max_prompt_length=limit)
    assert (result.rows, result.dropped) == ({"train": 2, "test": 2}, {"train": 1, "test": 1})
    assert f"dropped 1 train rows over {limit} tokens" in lines


def test_cli_registers_prepare_data(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": f"q{i}", "answer": str(i)} for i in range(10)])
    assert (
        cli.main(
            [
                "prepare-data",
                "--train",
                str(train),
                "--test-fraction",
                "0.2",
                "--data-source",
                "my/task",
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "split 10 good rows with seed 0: 8 train, 2 test" in out
    with pytest.raises(SystemExit) as stopped:  # --test or --test-fraction
        cli.main(["prepare-data", "--train", str(train), "--data-source", "x", "--output", str(tmp_path / "o2")])
    assert stopped.value.code == 2
    assert "one of the arguments --test --test-fraction is required" in capsys.readouterr().err


def test_a_csv_saved_by_excel_with_a_byte_order_mark_reads_its_first_column(tmp_path):
    """issue 32 item 16: every row was "column question: missing" (the mark was read into the first column's name)."""
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffq,a\nWie viel ist 2 + 2?,4\nUnd 3 + 3?,6\n".encode("utf-8"))
    result, _ = run(tmp_path, train=path, test_fraction=0.5)
    assert (result.read, result.rows, result.bad) == ({"train": 2}, {"train": 1, "test": 1}, [])
    questions = sorted(
        row["extra_info"]["question"]
        for split in ("train", "test")
        for row in pq.read_table(tmp_path / "out" / f"{split}.parquet").to_pylist()
    )
    assert questions == ["Und 3 + 3?", "Wie viel ist 2 + 2?"]


def test_a_wrong_csv_column_is_said_once_with_the_header(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("frage,antwort\n" + "".join(f"{i} + {i}?,{2 * i}\n" for i in range(300)))
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=path, test_fraction=0.5, question_column="question", answer_column="antwort")
    assert (
        str(caught.value)
        == f"--question-column question: no row of {path} has that column; its columns are frage, antwort\n  fix: pass"
        " --question-column with one of them"
    )


def test_a_csv_header_naming_a_column_twice_and_rows_with_extra_fields_are_refused(tmp_path):
    twice = tmp_path / "twice.csv"
    twice.write_text("q,a,a\nx,1,2\n")
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=twice, test_fraction=0.5)
    assert (
        str(caught.value)
        == f"{twice}'s header names the column 'a' more than once (q,a,a): the csv module would keep only the last of"
        " each\n  fix: give each column its own name in the header line"
    )
    extra = tmp_path / "extra.csv"
    extra.write_text("q,a\nConvert 2 km to m.,2000\nConvert 1,5 km to m.,1500\nConvert 3 km to m.,3000\n")
    result, _ = run(tmp_path, train=extra, test_fraction=0.5)
    assert [str(bad) for bad in result.bad] == [
        f"{extra} line 3: 3 fields, but the header names 2 (quote a text holding a comma)"
    ]
    assert result.rows == {"train": 1, "test": 1}


@pytest.mark.parametrize(
    "template, shown",
    [
        ("{question} The answer is {answer}.", "{answer}"),
        ("{question} {hint} {Answer}", "{Answer}, {hint}"),
        ("{question} Show work {0}.", "{0}"),  # new-user trial: str.format's positional fields were written as text
        ("{question} {}", "{}"),
    ],
)
def test_a_template_placeholder_other_than_question_is_refused(tmp_path, template, shown):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5, prompt_template=template)
    assert caught.value.message.startswith(
        f"--prompt-template {template!r} has {shown}: only {{question}} is filled in, so the model would read {shown}"
        " as it is"
    )
    assert caught.value.fix == f"remove {shown} from the template; only {{question}} is replaced"
    assert not (tmp_path / "out").exists()
    # braces that are not a placeholder stay text
    result, _ = run(tmp_path, train=train, test_fraction=0.5, prompt_template='{question} Reply as {"answer": N}.')
    assert result.rows["train"] + result.rows["test"] == 4


def test_the_same_column_twice_and_the_same_file_twice_are_refused(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(
        VerlfitError,
        match="^--question-column and --answer-column are both 'q': the answer would be the question itself",
    ):
        run(tmp_path, train=train, test_fraction=0.5, answer_column="q")
    (tmp_path / "link.jsonl").symlink_to(train)
    for same in (train, tmp_path / "link.jsonl", tmp_path / "." / "train.jsonl"):
        with pytest.raises(VerlfitError) as caught:
            run(tmp_path, train=train, test=same)
        assert caught.value.message.startswith(
            f"--test {same} is the same file as --train {train}: every test row would also be a training row"
        )
    assert not (tmp_path / "out").exists()


def test_a_float_column_of_whole_numbers_with_a_null_keeps_the_integers_and_names_the_null_row(tmp_path):
    """issue 32 item 17: a pandas integer column with a missing value is float64 in parquet; 3 became "3.0"."""
    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"q": ["a?", "b?", "c?", "d?"], "a": pa.array([3.0, None, 12345678901.0, 0.25], pa.float64())}), path
    )
    result, _ = run(tmp_path, train=path, test_fraction=0.25, seed=0)
    assert [str(bad) for bad in result.bad] == [f"{path} row 1, column a: blank"]
    truths = {
        row["extra_info"]["question"]: row["reward_model"]["ground_truth"]
        for split in ("train", "test")
        for row in pq.read_table(tmp_path / "out" / f"{split}.parquet").to_pylist()
    }
    assert truths == {"a?": "3", "c?": "12345678901", "d?": "0.25"}


def test_files_that_are_not_rows_say_what_they_are(tmp_path):
    """issue 32 item 18: an empty file said "check the columns"; a folder or FIFO "no such file"."""
    import os

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    header = tmp_path / "header.csv"
    header.write_text("q,a\n")
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone.jsonl")
    expected = {
        empty: f"--train {empty} is empty (0 bytes)",
        blank: f"--train {blank} holds blank lines only: it is empty of data",
        header: f"--train {header} holds a header line and no row: it is empty of data",
        folder: f"--train {folder} is a folder, not a file",
        fifo: f"--train {fifo} is a named pipe (FIFO), not a file",
        dangling: f"--train {dangling} is a symbolic link to {tmp_path / 'gone.jsonl'}, which does not exist",
        tmp_path / "none.jsonl": f"--train {tmp_path / 'none.jsonl'} does not exist",
    }
    for path, message in expected.items():
        with pytest.raises(VerlfitError) as caught:
            run(tmp_path, train=path, test_fraction=0.5)
        assert (caught.value.message, caught.value.exit_code) == (message, 2)


def test_a_jsonl_or_json_file_with_a_byte_order_mark_reads_every_row(tmp_path):
    """New-user trial: a .jsonl saved with a UTF-8 byte-order mark lost its first row ('Unexpected UTF-8 BOM')."""
    from verlfit.prepare_data import read_rows

    rows = [{"q": "one?", "a": "1"}, {"q": "two?", "a": "2"}]
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(row) + "\n" for row in rows).encode())
    array = tmp_path / "bom.json"
    array.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    for path in (jsonl, array):
        read = read_rows(path)
        assert [(row.values, row.problem) for row in read] == [(rows[0], ""), (rows[1], "")]


def test_an_input_the_user_may_not_read_is_a_clean_error(tmp_path, monkeypatch):
    """New-user trial: an unreadable --train (a user without read permission) ended in a PermissionError traceback."""
    import builtins
    import errno

    from verlfit.prepare_data import read_rows

    path = write_jsonl(tmp_path / "locked.jsonl", [{"q": "one?", "a": "1"}])
    real_open = builtins.open

    def denied(file, *args, **kwargs):  # tests run as root, which no file mode stops: the kernel's answer, faked
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(VerlfitError) as error:
        read_rows(path, "--train")
    assert error.value.message == f"cannot read --train {path}: permission denied"
    assert (
        error.value.fix == f"give your user read access to {path} (or copy it somewhere you can read), then run again"
    )
    assert error.value.exit_code == 2


def test_a_csv_separated_by_semicolons_as_excel_saves_it_in_german_reads_its_columns(tmp_path):
    """New-user trial: Excel's German CSV (';' separated, a byte-order mark) was one column named 'frage;antwort'."""
    from verlfit.prepare_data import read_rows

    path = tmp_path / "aufgaben.csv"
    path.write_bytes(
        b"\xef\xbb\xbf" + 'frage;antwort\nWie viel ist 2,5 + 1?;3,5\n"Gr\u00fc\u00dfe; sagt er";7\n'.encode()
    )
    read = read_rows(path)
    assert [row.values for row in read] == [
        {"frage": "Wie viel ist 2,5 + 1?", "antwort": "3,5"},
        {"frage": "Grüße; sagt er", "antwort": "7"},
    ]
    # a comma in the header keeps the comma as the separator, semicolons in the texts or not
    comma = tmp_path / "comma.csv"
    comma.write_text('question,answer\n"a; b",1\n')
    assert [row.values for row in read_rows(comma)] == [{"question": "a; b", "answer": "1"}]


def test_a_csv_quote_left_open_is_named_with_its_line(tmp_path):
    """New-user trial: an unclosed quote swallowed the rest of the file and was reported as a blank answer."""
    from verlfit.prepare_data import read_rows

    path = tmp_path / "open.csv"
    path.write_text('question,answer\n"one?,1\ntwo?,2\n')
    with pytest.raises(VerlfitError) as error:
        read_rows(path)
    assert error.value.message == f"{path} line 2: not valid CSV (unexpected end of data)"  # where the quote opens
    assert error.value.fix.startswith("close the quote that is left open")


def test_repeated_rows_a_test_split_seen_in_training_and_a_test_split_larger_than_train_are_warned(tmp_path):
    """New-user trial: every row duplicated 5 times, a test file identical to the training one (a copy, not the same
    file) and a test split 100x the training split were all written without a word."""
    rows = [{"q": f"Convert {i} km to m.", "a": str(1000 * i)} for i in range(1, 5)]
    train = write_jsonl(tmp_path / "train.jsonl", [row for row in rows for _ in range(5)])
    copy = write_jsonl(tmp_path / "copy.jsonl", [row for row in rows for _ in range(5)])
    result, lines = run(tmp_path, train=train, test=copy)
    assert [line for line in lines if line.startswith("warning:")] == [
        (
            "warning: train: 16 of 20 rows repeat an earlier row's question and answer (4 distinct): each copy is"
            " trained on again, weighing those rows more; fix: drop the repeats from --train (or keep them if that is"
            " meant)"
        ),
        (
            "warning: test: 16 of 20 rows repeat an earlier row's question and answer (4 distinct): each copy is scored"
            " again, weighing those rows more; fix: drop the repeats from --test (or keep them if that is meant)"
        ),
        (
            "warning: 20 of 20 test rows ask a question that a training row asks too: validation would score them on"
            " data the model trained on, not held-out data; fix: remove them from --test, or pass --test-fraction F"
            " instead of --test to hold out a share of --train's rows"
        ),
    ]
    assert result.rows == {"train": 20, "test": 20}  # written all the same: each can be meant
    small = write_jsonl(tmp_path / "small.jsonl", rows[:1])
    large = write_jsonl(
        tmp_path / "large.jsonl", [{"q": f"Convert {i} g to mg.", "a": str(1000 * i)} for i in range(100)]
    )
    _, lines = run(tmp_path, train=small, test=large, force=True)
    assert [line for line in lines if line.startswith("warning:")] == [
        "warning: test has 100 rows, 100x train's 1: verl scores every test row at each validation (--test-freq), so"
        " validation would take longer than the training between; fix: swap --train and --test if they are the wrong"
        " way round, or pass a smaller --test"
    ]
    distinct = write_jsonl(tmp_path / "distinct.jsonl", rows)
    _, lines = run(tmp_path, train=distinct, test_fraction=0.5, force=True)
    assert [line for line in lines if line.startswith("warning:")] == []


def test_a_gzip_file_named_jsonl_is_said_to_be_compressed_not_asked_to_be_saved_as_utf8(tmp_path):
    """New-user trial: a gzip file named .jsonl got "save the file as UTF-8"."""
    import gzip

    train = tmp_path / "rows.jsonl"
    train.write_bytes(gzip.compress(b'{"q": "Convert 2 km to m.", "a": "2000"}\n'))
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5)
    assert (caught.value.message, caught.value.fix, caught.value.exit_code) == (
        f"--train {train} is gzip-compressed (its first bytes are gzip's), not jsonl text",
        f"decompress it first (gunzip -c {train} > rows.plain.jsonl) and pass that file",
        2,
    )


def test_a_lone_surrogate_escape_is_a_bad_row_named_by_line_and_column(tmp_path, capsys):
    """New-user trial (finding 5): a jsonl line with a lone surrogate escape (``"bad \\ud800 x"``) was counted good,
    then pyarrow's UnicodeEncodeError ended the command with a traceback, exit 1."""
    rows = [
        {"q": "bad \ud800 x", "a": "3"},
        {"q": "Convert 2 km to m.", "a": "x \udc00"},
        {"q": "Convert 3 m to cm.", "a": "300"},
        {"q": "Convert 5 kg to g.", "a": "5000"},
    ]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    assert "\\ud800" in train.read_text()  # json.dumps wrote the escape, as the trial's file has it
    result, lines = run(tmp_path, train=train, test_fraction=0.5)
    reason = (
        "holds the lone surrogate {} (half of a UTF-16 pair, from a \\u escape): it is not text and cannot be written"
    )
    assert [str(bad) for bad in result.bad] == [
        f"{train} line 1, column q: " + reason.format("\\ud800"),
        f"{train} line 2, column a: " + reason.format("\\udc00"),
    ]
    assert lines[0] == f"read {train}: 4 rows, 2 good"
    assert result.rows == {"train": 1, "test": 1}
    with pytest.raises(VerlfitError) as caught:
        run(tmp_path, train=train, test_fraction=0.5, strict=True, output_dir=tmp_path / "strict")
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(f"2 bad row(s) and --strict:\n  {train} line 1, column q: holds the lone")
    assert not (tmp_path / "strict").exists()
