"""Subcommands of the ``rods`` CLI, one module each (see ``rods_gym.cli``)."""
