"""verl's ``verl.third_party``: version shims over the optional inference engines (vLLM, SGLang).

Importing these modules never imports the engines; the engine objects they re-export are loaded on first use and
raise ``MissingExtraError`` (naming the pip extra) when the engine is not installed.
"""
