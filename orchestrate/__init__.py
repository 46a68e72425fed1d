"""The orchestration room: what runs a study, above the roles.

    units       the work of a study as data: a training run (TrainUnit) or a measurement job (MeasureUnit),
                each with its key, the role's command line that runs it and `done` (its outputs complete)
    engines     the engines that run units to completion: the local tiny path and Ray, with their unit
                records in the state store (rcea.state) and the progress line
    ops         the operations behind tasks.py (Invoke): command builders, the study and its stages,
                lockfiles, doctor

The arrows go one way: orchestrate/ imports rcea/ (the shared core) and starts the roles only through their
command lines (`python -m train ...`, `python -m infer plan|run-job|worker ...`); no role and nothing in rcea/
imports it (tests/common/test_import_graph.py). It runs in the tools environment (standard library, Invoke, Ray);
the train and infer images carry it because their containers are the Ray cluster's nodes, which unpickle units.
"""
