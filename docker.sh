#!/usr/bin/env bash
# Start etcd, PostgreSQL and Placement as containers, for users who have Docker.
# (The local alternative without Docker is `make up`.)
#
#   ./docker.sh        start (Placement at http://localhost:8080/, etcd at localhost:2379)
#   ./docker.sh down   stop and remove the containers (the database volume is kept)
#
# Images: the etcd project's own image, the official postgres image, and the
# official python image with openstack-placement installed from PyPI at start.
# Placement is configured only through OS_<GROUP>__<OPTION> environment variables.
# BIND=0.0.0.0 publishes the ports beyond this host (computes on other hosts need it).
set -euo pipefail

BIND=${BIND:-127.0.0.1}
NET=etcd-compute
ETCD_IMAGE=${ETCD_IMAGE:-quay.io/coreos/etcd:v3.5.17}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-postgres:16}
PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim}
DB_PASSWORD=${DB_PASSWORD:-placement}

if [ "${1:-up}" = down ]; then
  docker rm -f etcd-compute-placement etcd-compute-etcd etcd-compute-db >/dev/null 2>&1 || true
  docker network rm "$NET" >/dev/null 2>&1 || true
  echo "stopped"
  exit 0
fi

docker network inspect "$NET" >/dev/null 2>&1 || docker network create "$NET" >/dev/null

docker run -d --name etcd-compute-etcd --network "$NET" -p "$BIND:2379:2379" \
  -v etcd-compute-etcd:/etcd-data "$ETCD_IMAGE" \
  etcd --name etcd-compute --data-dir /etcd-data \
  --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --auto-compaction-retention 1 --max-txn-ops 4096 >/dev/null

docker run -d --name etcd-compute-db --network "$NET" \
  -e POSTGRES_USER=placement -e POSTGRES_PASSWORD="$DB_PASSWORD" -e POSTGRES_DB=placement \
  -v etcd-compute-db:/var/lib/postgresql/data "$POSTGRES_IMAGE" >/dev/null

# allocation_conflict_retry_count=1: with several workers and the default of 10,
# two racing claims for the last unit both succeeded in over half of our trials.
# The scheduler retries 409 placement.concurrent_update itself.
docker run -d --name etcd-compute-placement --network "$NET" -p "$BIND:8080:8080" \
  -e OS_PLACEMENT_DATABASE__CONNECTION="postgresql+psycopg2://placement:$DB_PASSWORD@etcd-compute-db/placement" \
  -e OS_PLACEMENT_DATABASE__SYNC_ON_STARTUP=True \
  -e OS_API__AUTH_STRATEGY=noauth2 \
  -e OS_PLACEMENT__ALLOCATION_CONFLICT_RETRY_COUNT=1 \
  -e OS_PLACEMENT__RANDOMIZE_ALLOCATION_CANDIDATES=True \
  "$PYTHON_IMAGE" sh -c '
    pip install --quiet --no-cache-dir openstack-placement psycopg2-binary gunicorn &&
    until python -c "import socket; socket.create_connection((\"etcd-compute-db\", 5432), 2)"; do sleep 1; done &&
    exec gunicorn --workers 4 --bind 0.0.0.0:8080 placement.wsgi.api:application' >/dev/null

echo "etcd:      http://$BIND:2379"
echo "Placement: http://$BIND:8080/ (noauth2, token 'admin'; ready once pip has finished: docker logs -f etcd-compute-placement)"
