-- Argo CD health check for stagehand.dev/MigrationRun (a kstatus resource: Stagehand writes
-- status.observedGeneration and the Ready, Reconciling and Stalled conditions from its first
-- reconcile on; the CRD defaults status.observedGeneration to -1 until then).
-- Install it in argocd-cm as resource.customizations.health.stagehand.dev_MigrationRun.
-- Lua 5.1 with the base and table libraries only, as argocd-cm scripts run without
-- resource.customizations.useOpenLibs: no string.* or math.*.
--   not observed yet (observedGeneration absent, -1 or not the generation): Progressing
--   Stalled=True (failed, invalid, preflight failed, declarations changed): Degraded
--   Ready=True (succeeded, dry run included): Healthy
--   Ready reason Suspended (the Migration is suspended) or AwaitingApproval (a Manual run
--   waits for its plan's approval): Suspended
--   anything else (waiting, running): Progressing with the Ready reason and message
local hs = {}
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
local observed = nil
if obj.status ~= nil then
  observed = obj.status.observedGeneration
end
if observed == nil or observed == -1 or (generation ~= nil and observed ~= generation) then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
local ready = nil
local stalled = nil
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    elseif condition.type == "Stalled" then
      stalled = condition
    end
  end
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message or ""
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
elseif ready ~= nil and (ready.reason == "Suspended" or ready.reason == "AwaitingApproval") then
  hs.status = "Suspended"
  hs.message = ready.message or ""
elseif ready ~= nil then
  hs.status = "Progressing"
  hs.message = tostring(ready.reason) .. ": " .. (ready.message or "")
else
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report the Ready condition"
end
return hs
