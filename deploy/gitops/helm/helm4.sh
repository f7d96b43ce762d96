# Helm 4: --wait is kstatus, which waits for the run (Ready) and fails on Stalled.
helm upgrade --install migrations-pre deploy/charts/stagehand-migration -n opendesk \
  --wait --timeout 60m -f migrations-pre.yaml
