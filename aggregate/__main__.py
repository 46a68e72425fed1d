"""``python -m aggregate``: see ``aggregate.cli``."""

from aggregate.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
