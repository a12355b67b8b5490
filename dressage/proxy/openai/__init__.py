"""The proxy's OpenAI-compatible layer: chat messages to tokens and replies back to messages.

`/v1/chat/completions` for blackbox agents: the chat template, incremental tokenization, the
reply read into content, reasoning and tool calls, and the endpoint itself. The rollout core
(`dressage.proxy`) does not depend on this package except to mount its routes.
"""
