"""Commands: thin modules that parse a subcommand's options, call the layers below and
print. ``osu_dl_bench.cli`` dispatches to them."""
