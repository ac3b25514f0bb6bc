"""``python -m seqrec.serve RUN_DIR``: a synonym of ``python -m seqrec serve RUN_DIR``."""

from seqrec.serve.cli import main

if __name__ == "__main__":
    main()
