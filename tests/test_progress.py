"""Progress of long work: the core counts (``precompute.progress.Count``), the CLI draws the counts as one progress
bar per run of them instead of printing a line per update, and echoes the other lines indented."""

import click
from click.testing import CliRunner

from cli.progress import Reporter
from precompute.progress import Count, indented


def _run(lines):
    @click.command()
    def tell():
        with Reporter() as progress:
            for line in lines:
                progress(line)
    return CliRunner().invoke(tell)


def test_a_count_is_its_text_and_keeps_its_numbers_through_indentation():
    # given a count, and a part of the work whose progress is indented
    told = []
    part = indented(told.append)
    # when both a count and a line are told through the part
    part(Count(128, 693, "steps"))
    part("building features")
    # then the count reads as text, arrives unindented with its numbers, and the line is indented
    assert told[0] == "128/693 steps" and isinstance(told[0], Count)
    assert (told[0].done, told[0].total, told[0].unit) == (128, 693, "steps")
    assert told[1] == "  building features" and not isinstance(told[1], Count)


def test_counts_are_one_progress_bar_not_a_line_each():
    # given a run that tells a line, six counts of one total, a line, then counts of another total
    lines = ["replaying", *(Count(d, 600, "steps") for d in range(100, 700, 100)), "judged",
             Count(5, 10, "periods"), Count(10, 10, "periods")]
    # when the CLI reports it (not on a terminal, as in a log file)
    out = _run(lines)
    # then each line is echoed indented, each run of counts writes its label once, and no count is a line of its own
    assert out.exit_code == 0, out.output
    rows = [r for r in out.output.splitlines() if r.strip()]
    assert rows == ["  replaying", "  steps", "  judged", "  periods"], out.output
    assert "/600" not in out.output
