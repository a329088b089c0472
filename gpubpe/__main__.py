"""``python -m gpubpe`` runs the command line (see ``gpubpe --help``)."""

from .cli import main

raise SystemExit(main())
