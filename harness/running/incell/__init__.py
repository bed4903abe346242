"""The harness's foot inside a cell: its processes there, one module per protocol.

Standard library only, and never imports the harness: it runs in the cell's own interpreter,
where only the libraries under test are installed. The harness starts `__main__.py` by its
path (`python .../incell/__main__.py VERB ...`; the verbs: `main`), which loads this package by
path too, under a name of its own (`harness_incell`), its modules importing one another
relatively: a scenario can import nothing of the harness's folders by a plain name. Importing
this package does nothing; the harness imports a few of its names (`zygote.record_digest`,
`lifeline.LIFELINE_ENV`, ...) from it as a package of its own.

The protocols, each beside its partner on the harness's side (harness/running/):

- `main` reads the verb and starts one of them;
- `scenario`: one scenario file run as __main__, what happened written as JSON (runner.py reads it);
- `suite`: a team's pytest suite, one event line per test (testsuite.py reads them);
- `server`: the fork server: preloads, then forks one scenario per request (server.py);
- `preload`: importing a preload, with the watch for modules that initialise CUDA (culprits.py,
  preloads.py);
- `bytecode`: every module's bytecode in one folder shared by the envs, compiled ahead (bytecode.py);
- `park`: a server let go of its sweep and taken by the next one (kept.py);
- `zygote`: torch imported once, a server forked per cell, which adopts the cell's env and
  rebases every loaded module onto it (zygote.py);
- `lifeline`: EOF on the harness's pipe kills what runs and exits (processes.py); it holds the
  state the protocols share: the lifeline's descriptor and the running scenario's pid;
- `files`: a JSON file written at once.
"""
