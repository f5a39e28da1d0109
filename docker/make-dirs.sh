#!/bin/sh
# The directories a container writes or reads, owned by the image's user and group 0, group-writable:
# the image's user writes them, and so does any `docker run --user UID` (its group is 0).
# Named volumes mounted there start with this ownership. Usage: make-dirs.sh USER [PREFIX]
set -eu
user="$1"
prefix="${2:-}"
# /work: working directory (hpo-studies.db, reports); /artifacts: checkpoints and the best model;
# /cache: tokenized data and model downloads; /data, /spaces: the host's data and spaces, mounted read-only.
for dir in /work /artifacts /cache /data /spaces; do
    install -d -o "$user" -g 0 -m 2775 "$prefix$dir"
done
