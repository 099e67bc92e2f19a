"""verlfit.cli: how every command's end is said."""


def test_ctrl_c_in_a_librarys_destructor_as_a_command_finishes_is_one_line_and_130(monkeypatch, capsys):
    """New-user trial: Ctrl-C landing in datasets' Dataset.__del__ as prepare-data finished printed "Exception ignored
    ... KeyboardInterrupt" with a traceback, and verlfit exited 0."""
    from verlfit import cli

    class FreedLate:
        def __del__(self):
            raise KeyboardInterrupt

    def finishes_then_interrupted(args):
        holder = [FreedLate()]
        holder.append(holder)  # a cycle: freed by the garbage collector, not at return
        return 0

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.commands["doctor"].set_defaults(func=finishes_then_interrupted)
    assert cli.main(["doctor"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "verlfit: interrupted as it finished: what it wrote is complete\n"
