"""At scale: a what-if roofline of the models and GPUs people run, from a config.json and the cited spec tables alone
(no weights, no GPU): `config` (shipped configs, a folder or a hub id), `params` (exact counts by part, bytes per
dtype), `interconnect` (cited NVLink/PCIe figures), `whatif` (floors, ceilings, ridge and max batch, tensor
parallel), `explain` (the formulas with their numbers), `local` (this machine's measured gap to its own floor)."""
