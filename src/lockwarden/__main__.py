from lockwarden.entry import main

raise SystemExit(main())
