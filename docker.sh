#!/usr/bin/env bash
# Start etcd, PostgreSQL, Placement, Keystone and Glance as containers, for users who have
# Docker.
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
# user); Placement (gunicorn) serves TLS and requires a cluster certificate; Keystone and
# Glance serve TLS with certificates of the same CA (their clients authenticate with
# Keystone passwords). Then:
#   cluster.py --pki $PKI --config schedule.yaml host add <name>   for each hypervisor.
#
# Images: the etcd project's own image, the official postgres image, and the
# official python image with openstack-placement, keystone or glance installed from PyPI at
# start. Placement is configured only through OS_<GROUP>__<OPTION> environment variables;
# Keystone too; Glance with a glance-api.conf written here (its stores are registered after
# the environment is read). Keystone's and Glance's databases live in the PostgreSQL
# container beside Placement's; Glance's file store in a volume. Keystone is bootstrapped
# once it answers (projects admin, service, demo, alt; users admin, glance, etcd-compute,
# demo, alt; the catalog: tools/local_services/cloud.py), passwords in $CLOUD_DIR, and
# run/docker-clouds.yaml is written for the `openstack` command line.
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
CLOUD_DIR=${CLOUD_DIR:-$PWD/run/docker-cloud}
# How long to wait for Keystone (it installs itself from PyPI at its first start).
KEYSTONE_WAIT=${KEYSTONE_WAIT:-300}
CONTAINERS="etcd-compute-glance etcd-compute-keystone etcd-compute-placement etcd-compute-etcd
  etcd-compute-db"

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
  for service in keystone glance; do
    "$PY" cluster.py --pki "$PKI" pki issue service $service --ip "$ADDRESS" --ip 127.0.0.1 \
      --dns etcd-compute-$service
  done
  # The compute API runs on this host (schedule.py api), not in a container.
  "$PY" cluster.py --pki "$PKI" pki issue service compute-api --ip "$ADDRESS" --ip 127.0.0.1
  SCHEME=https
  ETCD_TLS="--cert-file /pki/etcd-compute.crt --key-file /pki/etcd-compute.key
    --trusted-ca-file /pki/ca.crt --client-cert-auth"
  PLACEMENT_TLS="--certfile /pki/placement.crt --keyfile /pki/placement.key
    --ca-certs /pki/ca.crt --cert-reqs 2"
  KEYSTONE_TLS="--certfile /pki/keystone.crt --keyfile /pki/keystone.key"
  GLANCE_TLS="--certfile /pki/glance.crt --keyfile /pki/glance.key"
  CAFILE="cafile = /pki/ca.crt"
else
  SCHEME=http
  ETCD_TLS=""
  PLACEMENT_TLS=""
  KEYSTONE_TLS=""
  GLANCE_TLS=""
  CAFILE=""
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

# Keystone and Glance: their databases in the db container (made once), their passwords
# made once here.
mkdir -p "$CLOUD_DIR"
"$PY" -m tools.local_services.cloud passwords "$CLOUD_DIR"
password() {
  "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$CLOUD_DIR/passwords.json" "$1"
}
CREATE_DB='import os, sys, time, psycopg2
for _ in range(120):
    try:
        db = psycopg2.connect(host="etcd-compute-db", user="placement", dbname="placement",
                              password=os.environ["DB_PASSWORD"])
        break
    except psycopg2.OperationalError:
        time.sleep(1)
db.autocommit = True
cursor = db.cursor()
cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (sys.argv[1],))
if not cursor.fetchone():
    cursor.execute("CREATE DATABASE " + sys.argv[1])'
KEYSTONE_URL="$SCHEME://$ADDRESS:5000/v3"

# Keystone takes gunicorn's options from the environment (its own parser reads argv).
run etcd-compute-keystone --network "$NET" -p "$BIND:5000:5000" -v "$PKI:/pki:ro" \
  -v etcd-compute-keystone:/keys \
  -e DB_PASSWORD="$DB_PASSWORD" -e CREATE_DB="$CREATE_DB" \
  -e ADMIN_PASSWORD="$(password admin)" -e KEYSTONE_URL="$KEYSTONE_URL" \
  -e OS_DATABASE__CONNECTION="postgresql+psycopg2://placement:$DB_PASSWORD@etcd-compute-db/keystone" \
  -e OS_FERNET_TOKENS__KEY_REPOSITORY=/keys/fernet \
  -e OS_FERNET_RECEIPTS__KEY_REPOSITORY=/keys/fernet \
  -e OS_CREDENTIAL__KEY_REPOSITORY=/keys/credential \
  -e GUNICORN_CMD_ARGS="--workers 2 --bind 0.0.0.0:5000 $KEYSTONE_TLS --config /tmp/gunicorn.py" \
  "$PYTHON_IMAGE" sh -c '
    pip install --quiet --no-cache-dir keystone psycopg2-binary gunicorn &&
    python -c "$CREATE_DB" keystone && mkdir -p /keys/fernet /keys/credential &&
    keystone-manage db_sync &&
    keystone-manage fernet_setup --keystone-user root --keystone-group root &&
    keystone-manage credential_setup --keystone-user root --keystone-group root &&
    keystone-manage bootstrap --bootstrap-password="$ADMIN_PASSWORD" \
      --bootstrap-public-url "$KEYSTONE_URL" --bootstrap-internal-url "$KEYSTONE_URL" \
      --bootstrap-admin-url "$KEYSTONE_URL" --bootstrap-region-id RegionOne &&
    echo "wsgi_app = \"keystone.wsgi.api:application\"" > /tmp/gunicorn.py &&
    exec gunicorn'

# Glance: a file store in a volume, behind Keystone (paste flavor keystone); the service
# role reads and writes every project's images (the compute hosts, snapshots).
umask 077
cat > "$CLOUD_DIR/glance-api.conf" <<EOF
[DEFAULT]
enabled_backends = file:file
enabled_import_methods = [glance-direct]
[database]
connection = postgresql+psycopg2://placement:$DB_PASSWORD@etcd-compute-db/glance
[glance_store]
default_backend = file
[file]
filesystem_store_datadir = /images/store
[os_glance_staging_store]
filesystem_store_datadir = /images/staging
[os_glance_tasks_store]
filesystem_store_datadir = /images/tasks
[paste_deploy]
flavor = keystone
config_file = /usr/local/etc/glance/glance-api-paste.ini
[oslo_policy]
enforce_new_defaults = True
enforce_scope = True
policy_file = /etc/glance-extra/policy.yaml
[keystone_authtoken]
www_authenticate_uri = $KEYSTONE_URL
auth_url = $SCHEME://etcd-compute-keystone:5000/v3
$CAFILE
auth_type = password
username = glance
password = $(password glance)
project_name = service
user_domain_name = Default
project_domain_name = Default
EOF
umask 022
echo '"context_is_admin": "role:admin or role:service"' > "$CLOUD_DIR/policy.yaml"
run etcd-compute-glance --network "$NET" -p "$BIND:9292:9292" -v "$PKI:/pki:ro" \
  -v etcd-compute-glance:/images -v "$CLOUD_DIR/glance-api.conf:/etc/glance/glance-api.conf:ro" \
  -v "$CLOUD_DIR/policy.yaml:/etc/glance-extra/policy.yaml:ro" \
  -e DB_PASSWORD="$DB_PASSWORD" -e CREATE_DB="$CREATE_DB" -e GLANCE_TLS="$GLANCE_TLS" \
  "$PYTHON_IMAGE" sh -c '
    pip install --quiet --no-cache-dir glance psycopg2-binary gunicorn &&
    python -c "$CREATE_DB" glance && mkdir -p /images/store /images/staging /images/tasks &&
    glance-manage db_sync &&
    exec gunicorn --workers 2 --threads 8 --worker-class gthread --bind 0.0.0.0:9292 \
      --timeout 120 $GLANCE_TLS glance.wsgi.api:application'

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

# Keystone's projects, users and catalog, once it answers (idempotent), and clouds.yaml.
TLS_ARGS=()
[ -z "${PLAIN:-}" ] && TLS_ARGS=(--pki "$PKI")
bootstrapped=""
for _ in $(seq "$KEYSTONE_WAIT"); do
  if "$PY" -m tools.local_services.cloud bootstrap "$CLOUD_DIR" --keystone "$ADDRESS:5000" \
      "${TLS_ARGS[@]}" --glance "$SCHEME://$ADDRESS:9292" \
      --placement "$SCHEME://$ADDRESS:8080" --compute "$SCHEME://$ADDRESS:8774/v2.1" \
      --api-config run/docker-schedule.yaml run/docker-api.yaml \
      --clouds run/docker-clouds.yaml 2>/dev/null; then
    bootstrapped=1
    break
  fi
  sleep 1
done

echo "etcd:      $SCHEME://$ADDRESS:2379"
echo "Placement: $SCHEME://$ADDRESS:8080/ (ready once pip has finished: docker logs -f etcd-compute-placement)"
echo "Keystone:  $KEYSTONE_URL"
echo "Glance:    $SCHEME://$ADDRESS:9292 (ready once pip has finished: docker logs -f etcd-compute-glance)"
if [ -n "$bootstrapped" ]; then
  echo "clouds:    run/docker-clouds.yaml (OS_CLIENT_CONFIG_FILE; clouds etcd-compute, etcd-compute-demo, etcd-compute-alt)"
  echo "compute API: $PY schedule.py --config run/docker-api.yaml api   ($SCHEME://$ADDRESS:8774/v2.1, in the catalog; seed flavors with openstack flavor create)"
else
  echo "Keystone did not answer within $KEYSTONE_WAIT s: run ./docker.sh again to bootstrap it"
fi
[ -z "${PLAIN:-}" ] && echo "operator config: run/docker-schedule.yaml; hosts: $PY cluster.py --pki $PKI --config run/docker-schedule.yaml host add NAME"
exit 0
