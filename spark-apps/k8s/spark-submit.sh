#!/usr/bin/env bash
# Submit the traffic heat map straight to a Kubernetes API server, without an operator.
#   K8S=https://my-apiserver:6443 spark-apps/k8s/spark-submit.sh
# Needs k8s/rbac.yaml applied and the image from spark-apps/Dockerfile pushed where the
# cluster can pull it. Files already in the image are named with local://.
set -euo pipefail
: "${K8S:?set K8S to the API server URL, e.g. https://127.0.0.1:6443}"
IMAGE="${IMAGE:-hedwig-spark:0.1.0}"
ZK="${ZK:-zookeeper.hedwig.svc.cluster.local:2181}"
REGION="${REGION:-default}"
exec spark-submit \
  --master "k8s://${K8S}" \
  --deploy-mode cluster \
  --name traffic-heatmap \
  --conf spark.kubernetes.namespace=hedwig \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=spark \
  --conf spark.executor.instances=2 \
  --conf spark.executor.memory=1g \
  --conf spark.sql.shuffle.partitions=8 \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.options.claimName=hedwig-spark-data \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.data.mount.path=/data \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.data.options.claimName=hedwig-spark-data \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.data.mount.path=/data \
  local:///opt/hedwig/jobs/traffic_heatmap.py \
  --zookeeper "${ZK}" --region "${REGION}" \
  --checkpoint /data/checkpoints/traffic-heatmap --output-dir /data/heatmap
