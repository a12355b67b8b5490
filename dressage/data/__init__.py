"""What every layer shares: weight-version labels, runs of versions, samples, groups, batches
and the `/segments` wire codec.

Modules: `versions` (which labels are real, the initial label, spans counted in observation
order), `spans` (`VersionSpan`, the one type for runs of versions, and SGLang's span list),
`samples` (`Sample` and its version metadata, masking of non-last-version tokens, batch span
statistics), `groups` (`Group`, `TrainBatch` and the figures its collection counted,
`GroupFailed`), `codec` (`sample_to_record`, `record_to_sample`). The figures of a step are
declared one layer down, with the job model (`dressage.api.figures`), because the job's status
shows some of them. Pure Python: no torch, no HTTP.
"""
