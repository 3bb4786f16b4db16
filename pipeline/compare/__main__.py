import sys

from pipeline.compare.cli import main

sys.exit(main())
