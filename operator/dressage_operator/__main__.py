"""`python -m dressage_operator`: same as `dressage-operator`."""

import sys

from dressage_operator.main import main

sys.exit(main())
