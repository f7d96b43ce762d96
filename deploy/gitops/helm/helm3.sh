# Helm 3: --wait ignores custom resources; the chart's hook Job runs `stagehand wait` instead.
helm upgrade --install migrations-pre deploy/charts/stagehand-migration -n opendesk \
  --timeout 60m -f migrations-pre.yaml \
  --set wait.job.enabled=true --set wait.job.timeout=55m
