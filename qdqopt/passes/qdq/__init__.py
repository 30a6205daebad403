"""The selector/action machinery of ``QDQSelectorActionTransformer``: selectors, actions and the CPU registry."""
