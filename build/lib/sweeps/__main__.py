from sweeps.cli.main import main

raise SystemExit(main())
