from persyn.cli import main

main()
