"""What several test modules share: builders of scenes, episodes, bags and policies, processes of
the graph and the vehicle, readers of what they write. Importable as ``helpers`` because pytest puts
``test/`` (conftest.py's folder, the rootdir-relative test root) first on ``sys.path``; the modules
here import nothing from ``test_*`` modules, and no ``test_*`` module imports another."""
