-- Health of a kaddons add-on (group addons.kaddons.dev) for Argo CD.
--   Suspended:   spec.suspend, the addons.kaddons.dev/paused annotation, or Ready's reason Paused
--   Progressing: kaddons has not yet reported on the current generation, or it is applying,
--                upgrading, rolling out or waiting for dependencies
--   Degraded:    Stalled=True (a configuration error that needs a human), or Degraded=True
--                while Ready is not True (an apply or an upgrade failed)
--   Healthy:     Ready=True for the current generation
-- The message is the Ready condition's message whenever it describes the current generation.
local hs = {}

local function condition(conditionType)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == conditionType then
      return c
    end
  end
  return nil
end

local generation = obj.metadata.generation
local annotations = obj.metadata.annotations or {}
local spec = obj.spec or {}
local status = obj.status or {}
local ready = condition("Ready")

-- What the user asked for wins: a paused add-on is not applied, whatever its last status.
if spec.suspend == true or annotations["addons.kaddons.dev/paused"] == "true" then
  hs.status = "Suspended"
  if ready ~= nil and ready.reason == "Paused" and ready.observedGeneration == generation then
    hs.message = ready.message
  else
    hs.message = "paused by spec.suspend or the addons.kaddons.dev/paused annotation"
  end
  return hs
end

-- The operator configuration can pause a whole kind; only the Ready reason shows it. A
-- change made while paused is not applied, so Ready may lag behind the generation.
if ready ~= nil and ready.reason == "Paused" then
  hs.status = "Suspended"
  hs.message = ready.message
  return hs
end

if status.observedGeneration == nil or ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for kaddons to report on generation " .. tostring(generation)
  return hs
end
if status.observedGeneration ~= generation or ready.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "waiting for kaddons to observe generation " .. tostring(generation) ..
    " (status is for generation " .. tostring(status.observedGeneration) ..
    ", Ready for generation " .. tostring(ready.observedGeneration) .. ")"
  return hs
end

hs.message = ready.message

if ready.status == "True" then
  hs.status = "Healthy"
  return hs
end

local stalled = condition("Stalled")
local degraded = condition("Degraded")
if (stalled ~= nil and stalled.status == "True") or (degraded ~= nil and degraded.status == "True") then
  hs.status = "Degraded"
  return hs
end

hs.status = "Progressing"
return hs
