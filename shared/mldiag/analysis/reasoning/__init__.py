"""The investigation: a reasoner (Gemini or the offline one) follows up on the evidence and concludes.

Prompts fence every profile string off as data, the follow-up tools answer only from the profile, and validation
keeps a conclusion to what the collected data shows.
"""
