from fused.cli import main

raise SystemExit(main())
