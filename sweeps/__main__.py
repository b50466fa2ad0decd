from sweeps.cli import main

raise SystemExit(main())
