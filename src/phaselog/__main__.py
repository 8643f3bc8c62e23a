from phaselog.cli import main

main()
