"""tower: a data-parallel training runtime launched with MPI. tower.torch is its PyTorch front end."""
