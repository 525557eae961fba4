"""What the scripts torch_test.py runs under mpirun share: how a rank prints a line."""
import sys


def say(text):
    """One write per line: mpirun forwards each write as it comes, so two ranks' lines cannot mix."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
