#!/usr/bin/env bash
# Start etcd, PostgreSQL and Placement as containers, for users who have Docker.
# (The local alternative without Docker is `make up`.)
#
#   ./docker.sh        start, or start again (after a reboot, or a second run: nothing is
#                      created twice; running containers are left running)
#   ./docker.sh down   stop and remove the containers (the volumes and certificates are kept)
#   PLAIN=1 ./docker.sh   plain TCP, no certificates and no RBAC (quick experiments)
#
# Secure by default: the cluster's certificates are made (once) in $PKI with this
# checkout's `cluster.py pki`; etcd serves TLS with client certificates (--client-cert-auth:
# the certificate's CN is the etcd user) and RBAC (root, the operator role, an operator
# user); Placement (gunicorn) serves TLS and requires a cluster certificate. Then:
#   cluster.py --pki $PKI --config schedule.yaml host add <name>   for each hypervisor.
#
# Images: the etcd project's own image, the official postgres image, and the
# official python image with openstack-placement installed from PyPI at start.
# Placement is configured only through OS_<GROUP>__<OPTION> environment variables.
# BIND=0.0.0.0 publishes the ports beyond this host (computes on other hosts need it);
# ADDRESS is the address clients use (it goes into the servers' certificates).
set -euo pipefail
cd "$(dirname "$0")"

BIND=${BIND:-127.0.0.1}
ADDRESS=${ADDRESS:-127.0.0.1}
NET=etcd-compute
ETCD_IMAGE=${ETCD_IMAGE:-quay.io/coreos/etcd:v3.5.17}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-postgres:16}
PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim}
DB_PASSWORD=${DB_PASSWORD:-placement}
PKI=${PKI:-$PWD/run/docker-pki}
PY=${PY:-.venv/bin/python}
CONTAINERS="etcd-compute-placement etcd-compute-etcd etcd-compute-db"

if [ "${1:-up}" = down ]; then
  for name in $CONTAINERS; do docker rm -f "$name" >/dev/null 2>&1 || true; done
  docker network rm "$NET" >/dev/null 2>&1 || true
  echo "stopped"
  exit 0
fi

# run NAME ARGS...: start the container NAME; start it again if it exists but is stopped
# (after a reboot); leave it alone if it runs.
run() {
  local name=$1; shift
  case "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null || echo absent)" in
    true) echo "$name: already running" ;;
    false) docker start "$name" >/dev/null && echo "$name: started again" ;;
    *) docker run -d --name "$name" --restart unless-stopped "$@" >/dev/null \
         && echo "$name: created" ;;
  esac
}

docker network inspect "$NET" >/dev/null 2>&1 || docker network create "$NET" >/dev/null

if [ -z "${PLAIN:-}" ]; then
  "$PY" cluster.py --pki "$PKI" pki init
  "$PY" cluster.py --pki "$PKI" pki issue etcd-member etcd-compute --ip "$ADDRESS" --ip 127.0.0.1 \
    --dns etcd-compute-etcd
  "$PY" cluster.py --pki "$PKI" pki issue placement placement --ip "$ADDRESS" --ip 127.0.0.1 \
    --dns etcd-compute-placement
  "$PY" cluster.py --pki "$PKI" pki issue root root
  "$PY" cluster.py --pki "$PKI" pki issue operator operator
  SCHEME=https
  ETCD_TLS="--cert-file /pki/etcd-compute.crt --key-file /pki/etcd-compute.key
    --trusted-ca-file /pki/ca.crt --client-cert-auth"
  PLACEMENT_TLS="--certfile /pki/placement.crt --keyfile /pki/placement.key
    --ca-certs /pki/ca.crt --cert-reqs 2"
else
  SCHEME=http
  ETCD_TLS=""
  PLACEMENT_TLS=""
fi

# shellcheck disable=SC2086  # the TLS flags are words on purpose
run etcd-compute-etcd --network "$NET" -p "$BIND:2379:2379" \
  -v etcd-compute-etcd:/etcd-data -v "$PKI:/pki:ro" "$ETCD_IMAGE" \
  etcd --name etcd-compute --data-dir /etcd-data \
  --listen-client-urls "$SCHEME://0.0.0.0:2379" --advertise-client-urls "$SCHEME://$ADDRESS:2379" \
  --auto-compaction-retention 1 --max-txn-ops 4096 $ETCD_TLS

run etcd-compute-db --network "$NET" \
  -e POSTGRES_USER=placement -e POSTGRES_PASSWORD="$DB_PASSWORD" -e POSTGRES_DB=placement \
  -v etcd-compute-db:/var/lib/postgresql/data "$POSTGRES_IMAGE"

# allocation_conflict_retry_count=1: with several workers and the default of 10,
# two racing claims for the last unit both succeeded in over half of our trials.
# The scheduler retries 409 placement.concurrent_update itself.
run etcd-compute-placement --network "$NET" -p "$BIND:8080:8080" -v "$PKI:/pki:ro" \
  -e OS_PLACEMENT_DATABASE__CONNECTION="postgresql+psycopg2://placement:$DB_PASSWORD@etcd-compute-db/placement" \
  -e OS_PLACEMENT_DATABASE__SYNC_ON_STARTUP=True \
  -e OS_API__AUTH_STRATEGY=noauth2 \
  -e OS_PLACEMENT__ALLOCATION_CONFLICT_RETRY_COUNT=1 \
  -e OS_PLACEMENT__RANDOMIZE_ALLOCATION_CANDIDATES=True \
  -e PLACEMENT_TLS="$PLACEMENT_TLS" \
  "$PYTHON_IMAGE" sh -c '
    pip install --quiet --no-cache-dir openstack-placement psycopg2-binary gunicorn &&
    until python -c "import socket; socket.create_connection((\"etcd-compute-db\", 5432), 2)"; do sleep 1; done &&
    exec gunicorn --workers 4 --bind 0.0.0.0:8080 $PLACEMENT_TLS placement.wsgi.api:application'

if [ -z "${PLAIN:-}" ]; then
  # RBAC on (root, the operator role and user), once etcd answers; idempotent.
  mkdir -p run
  cat > run/docker-schedule.yaml <<EOF
etcd: {endpoints: ["$ADDRESS:2379"], ca_cert: $PKI/ca.crt, cert: $PKI/operator.crt, key: $PKI/operator.key}
placement: {endpoint: "https://$ADDRESS:8080", ca_cert: $PKI/ca.crt, cert: $PKI/operator.crt, key: $PKI/operator.key}
EOF
  for _ in $(seq 30); do
    "$PY" cluster.py --pki "$PKI" --config run/docker-schedule.yaml etcd setup --operator operator \
      && break
    sleep 1
  done
fi

echo "etcd:      $SCHEME://$ADDRESS:2379"
echo "Placement: $SCHEME://$ADDRESS:8080/ (ready once pip has finished: docker logs -f etcd-compute-placement)"
[ -z "${PLAIN:-}" ] && echo "operator config: run/docker-schedule.yaml; hosts: $PY cluster.py --pki $PKI --config run/docker-schedule.yaml host add NAME"
exit 0
