"""Reasoning models an investigation can ask: Gemini on Vertex AI."""
