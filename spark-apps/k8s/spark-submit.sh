#!/usr/bin/env bash
# Submit the traffic heat map straight to a Kubernetes API server, without an operator.
#   K8S=https://my-apiserver:6443 spark-apps/k8s/spark-submit.sh [--conf k=v ...] [-- JOB ARGS]
# Needs k8s/rbac.yaml applied and the image from spark-apps/Dockerfile (`make images`) where
# the cluster's nodes find it (pushed to a registry, or imported into the nodes' runtime).
# Files already in the image are named with local://. Options before "--" go to
# spark-submit (credentials, resources); what follows "--" replaces the job's default
# arguments after --metadata/--region (e2e/test_realpods.py runs a bounded job this way).
# The pods run the image's Python whatever PYSPARK_PYTHON says where spark-submit runs.
set -euo pipefail
: "${K8S:?set K8S to the API server URL, e.g. https://127.0.0.1:6443}"
IMAGE="${IMAGE:-hedwig-spark:0.1.0}"
NAMESPACE="${NAMESPACE:-hedwig}"
ZK="${ZK:-zookeeper.hedwig.svc.cluster.local:2181}"
REGION="${REGION:-default}"
submit_args=()
while [[ $# -gt 0 && "$1" != "--" ]]; do submit_args+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
job_args=("$@")
if [[ ${#job_args[@]} -eq 0 ]]; then
  job_args=(--checkpoint /data/checkpoints/traffic-heatmap --output-dir /data/heatmap)
fi
exec spark-submit \
  --master "k8s://${K8S}" \
  --deploy-mode cluster \
  --name traffic-heatmap \
  --conf spark.kubernetes.namespace="${NAMESPACE}" \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
  --conf spark.pyspark.python=/opt/venv/bin/python \
  --conf spark.pyspark.driver.python=/opt/venv/bin/python \
  --conf spark.executor.instances=2 \
  --conf spark.executor.memory=1g \
  --conf spark.sql.shuffle.partitions=8 \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.options.claimName=hedwig-spark-data \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.mount.path=/data \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.data.options.claimName=hedwig-spark-data \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.data.mount.path=/data \
  ${submit_args[@]+"${submit_args[@]}"} \
  local:///opt/hedwig/jobs/traffic_heatmap.py \
  --metadata "${ZK}" --region "${REGION}" "${job_args[@]}"
