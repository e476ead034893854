-- Argo CD health check for kpe's SchedulingPolicy and Reservation (docs/guides/cluster-policies.md).
-- Healthy once kpe serves the object's current generation; Degraded when kpe refuses it or the set
-- it belongs to (status.conditions Ready False: its message says why, with the field paths);
-- Progressing until kpe has judged the current generation. Argo CD runs it with obj set.
local hs = {}
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "waiting for kpe to load it"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "waiting for kpe to load generation " .. generation
  return hs
end
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      if condition.status == "True" then
        hs.status = "Healthy"
      else
        hs.status = "Degraded"
      end
      hs.message = condition.message
      return hs
    end
  end
end
hs.status = "Progressing"
hs.message = "waiting for kpe's Ready condition"
return hs
