#!/bin/bash
# Entrypoint of the Spark image (spark-apps/Dockerfile) for Spark on Kubernetes.
#
# spark-submit --master k8s://... starts the driver pod with "driver <spark-submit args>" and
# the driver starts executor pods with "executor"; both read the rest of their settings from the
# SPARK_* variables Spark's Kubernetes backend sets on the pods. Anything else is run as given.
# tini reaps the JVM's and Python workers' children and forwards signals.
set -euo pipefail

classpath="${SPARK_HOME}/conf:${SPARK_HOME}/jars/*"
[[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]] && classpath+=":${SPARK_EXTRA_CLASSPATH}"

case "${1:-}" in
  driver)
    shift
    exec /usr/bin/tini -s -- "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # Spark passes extra JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4 -n)
    exec /usr/bin/tini -s -- "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec /usr/bin/tini -s -- "$@"
    ;;
esac
