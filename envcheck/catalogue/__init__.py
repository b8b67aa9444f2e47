"""The catalogue: YAML with source lines, validated once into frozen models."""
