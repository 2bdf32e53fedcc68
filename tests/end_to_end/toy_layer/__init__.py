"""A toy layer type added as docs/ARCHITECTURE.md's "a layer type" checklist says, one module
per step: its description (:mod:`.description`), its Keras builder (:mod:`.keras_builder`) and
its torch builder (:mod:`.torch_builder`). Importing a module registers what it holds."""
