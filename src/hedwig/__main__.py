from hedwig.cli.main import main

raise SystemExit(main())
