from sluicegate.cli import main

main()
