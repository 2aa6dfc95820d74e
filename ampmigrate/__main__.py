from ampmigrate.cli import entry

entry()
