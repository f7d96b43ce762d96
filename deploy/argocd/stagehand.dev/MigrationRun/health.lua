-- Argo CD health check for stagehand.dev Migration and MigrationRun (both kinds use it).
-- Install it in argocd-cm:
--   resource.customizations.health.stagehand.dev_Migration: |
--     <this file>
--   resource.customizations.health.stagehand.dev_MigrationRun: |
--     <this file>
-- It reads the kstatus conditions Stagehand writes: Stalled=True is Degraded, Ready=True is
-- Healthy, anything else (waiting, running, not yet observed) is Progressing.
local hs = { status = "Progressing", message = "waiting for Stagehand to report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata ~= nil and obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "Stagehand has not observed the latest change yet"
  return hs
end
local ready, stalled = nil, nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then ready = condition end
  if condition.type == "Stalled" then stalled = condition end
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
elseif ready ~= nil then
  hs.message = ready.reason .. ": " .. (ready.message or "")
end
return hs
