"""Module-level sub callables for the Worker tests (run in sub worker children)."""
import time


def add_one(x, *scalars):
    x += 1


def scale(x, factor):
    x *= factor


def copy(src, dst):
    dst[:] = src


def boom(x):
    raise ValueError(f"bad value {float(x[0])} in a sub callable")


def sleep_s(x, seconds):
    time.sleep(seconds)


def cpus_of_this_process(x):
    """Marks in x the CPUs the sub worker running it may use."""
    import os

    for cpu in os.sched_getaffinity(0):
        if cpu < len(x):
            x[cpu] = 1
