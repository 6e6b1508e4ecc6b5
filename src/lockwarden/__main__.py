from lockwarden.cli import main

raise SystemExit(main())
