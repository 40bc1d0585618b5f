"""`python -m eagerc` and the `eagerc` console script: see eagerc/cli and docs/cli.md."""
import sys


def main(argv=None):
    from .cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
