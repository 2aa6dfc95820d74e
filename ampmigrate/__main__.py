from ampmigrate.cli import main

main()
