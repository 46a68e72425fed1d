"""The operations layer behind `tasks.py` (Invoke): command builders, lockfiles, the study runner, doctor.

Runs in the tools environment (.envs/tools: the standard library and Invoke), so nothing here imports
torch, pandas or a role package. `tasks.py` only declares the tasks and their help; the work is here.

    commands   pure builders of every command line (local at the tiny scale, Compose at 3b/7b)
    shell      running commands: Invoke's dry run, Docker probes, .env
    lockfiles  how lockfiles/*.txt are compiled (uv pip compile) and the CPU twins' constraints
    study      the stage list of a whole study and the engine that runs it (study and demo); the engines
               that run work units are orchestrate/engines (local, ray)
    doctor     the preflight checks of a GPU host
"""
