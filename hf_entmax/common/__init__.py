"""What every layer shares, and nothing above it: Hub ids, the model-folder check, text files, the run's record files
and the config builder. Any layer may import it (training, hub, analysis, commands); it imports only modeling and
`hf_entmax.errors`."""
