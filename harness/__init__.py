"""attention-harness: drives the model core (model/) through data, training, evaluation and studies."""

__version__ = "0.1.0"
