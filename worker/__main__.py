from gradlab.cli import main

main(["worker"])
