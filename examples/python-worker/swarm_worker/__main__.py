"""`python -m swarm_worker`, as the image and the end-to-end tests run it; the console script
`swarm-python-worker` calls the same `main`."""

from swarm_worker import main

main()
