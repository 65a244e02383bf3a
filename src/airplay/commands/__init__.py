"""The sub-commands of ``airplay`` that more than one package serves: each module has
``register(sub)`` taking the CLI's sub-parsers object (:data:`airplay.cli.COMMAND_MODULES`) and
keeps its heavy imports inside its handlers. The top layer (docs/architecture.md): a command
may import any package, no package imports a command."""
