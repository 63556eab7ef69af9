"""The prepare commands as Python functions, with the command line's arguments.

``prep.pretokenize(...)`` is ``prep pretokenize ...`` and ``prep.decode_images(...)`` is
``prep decode-images ...``: each flag is a keyword argument of the same name (``--max-length``
is ``max_length``), ``config`` is ``--config``, and any other key of the config file can be
given as a keyword too (``pack=2048``, ``sft={"layout": "qa"}``), as on the command line with ``--set``. The CLI calls these functions, so the
two cannot drift apart. Relative paths resolve from the current directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["pretokenize", "decode_images"]


def _job_keys(*, input: str | list[str] | None, output: str | None, overwrite: bool | None, append: bool | None,
              update: bool | None, remove_missing: bool | None, executor: str | None, ray_address: str | None, ray_resources: dict[str, float] | None,
              max_reject_fraction: float | None) -> dict[str, Any]:
    """The config keys behind the flags every prepare command has (None: keep the config's value)."""
    ray = {k: v for k, v in (("address", ray_address), ("resources", ray_resources)) if v}
    return {"input": input, "output": output, "overwrite": overwrite, "append": append, "update": update, "remove_missing": remove_missing,
            "executor": executor, "ray": ray or None, "max_reject_fraction": max_reject_fraction}


def pretokenize(
    *,
    config: str | Path | None = None,
    input: str | list[str] | None = None,
    output: str | None = None,
    tokenizer: str | None = None,
    format: str | None = None,
    text_column: str | None = None,
    messages_column: str | None = None,
    max_length: int | None = None,
    overlong: str | None = None,
    pack: int | None = None,
    input_format: str | None = None,
    text_unit: str | None = None,
    passthrough: list[str] | None = None,
    sft_layout: str | None = None,
    prompt_template: str | None = None,
    response_template: str | None = None,
    overwrite: bool | None = None,
    append: bool | None = None,
    update: bool | None = None,
    remove_missing: bool | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    ray_resources: dict[str, float] | None = None,
    max_reject_fraction: float | None = None,
    **keys: Any,
) -> dict[str, Any]:
    """Tokenizes text sources into a Lance table (``prep pretokenize``).

    Without ``config``, ``input``, ``output``, ``tokenizer`` and ``format`` are required; with
    it, each argument given overrides the file's key. None keeps the config's value.

    Args:
        config: a YAML recipe (see ``configs/``); optional.
        input: a file, directory or glob (local or ``s3://``), or a list of them.
        output: the Lance table to write.
        tokenizer: ``builtin:mistral-v3``, a local directory or a HuggingFace hub id.
        format: ``"pretrain"`` (documents + EOS) or ``"sft"`` (loss on responses only).
        text_column: the document field of structured pretraining rows (default ``text``).
        messages_column: the SFT column with a list of ``{role, content}`` (default ``messages``).
        max_length: the longest row allowed, in tokens (default: no limit).
        overlong: ``"truncate"``, ``"reject"`` (default) or ``"split"`` for longer rows.
        pack: pack documents into rows of exactly this many tokens (config ``pack: {seq_len: N}``).
        input_format: ``"auto"`` (default: by extension), ``"jsonl"``, ``"json"``, ``"parquet"``, ``"csv"`` or ``"text"``.
        text_unit: a plain text file's document: ``"line"``, ``"paragraph"`` (default) or ``"file"``.
        passthrough: source fields copied to the table as strings (not with ``pack``).
        sft_layout: ``"auto"`` (default), ``"alpaca"``, ``"qa"`` or ``"messages"`` (config ``sft.layout``).
        prompt_template: a format string over ``{prompt}`` instead of the chat template (``sft.prompt_template``).
        response_template: a format string over ``{response}``; EOS is appended (``sft.response_template``).
        overwrite: replace a table prep wrote at ``output``.
        append: add the input files the table at ``output`` does not hold yet, as one new version
            (docs/guide.md, "Growing a table"); exclusive with ``overwrite``.
        update: as ``append``, and replace the rows of files that changed since (or moved: made anew under the new name).
        remove_missing: with ``append``/``update``, remove the rows of held files no longer among the inputs.
        executor: ``"auto"`` (default), ``"ray"`` or ``"local"``.
        ray_address: Ray cluster to join (default ``RAY_ADDRESS``).
        ray_resources: custom Ray resources each task asks for.
        max_reject_fraction: the share of rows that may be rejected before the job fails (default 0.1).
        **keys: any other key of :class:`prep.prepare.text.pretokenize.PretokenizeConfig`.

    Returns:
        The summary ``prep pretokenize --json`` prints (rows read/written/rejected, tokens, paths).

    Raises:
        PrepError: a missing, unknown or mistyped argument, a missing input, an output prep may not replace.

    Example:
        >>> import prep
        >>> prep.pretokenize(input="in.jsonl", output="out.lance", tokenizer="builtin:mistral-v3")
        Traceback (most recent call last):
        prep.errors.PrepError: argument 'format': Field required
    """
    from prep.runtime.config import load_config, merge
    from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

    sft = {k: v for k, v in (("messages_column", messages_column), ("layout", sft_layout),
                             ("prompt_template", prompt_template), ("response_template", response_template)) if v is not None}
    named = dict(tokenizer=tokenizer, format=format, text_column=text_column, sft=sft or None, max_length=max_length,
                 overlong=overlong, pack=pack, input_format=input_format, text_unit=text_unit, passthrough=passthrough,
                 **_job_keys(input=input, output=output, overwrite=overwrite, append=append, update=update, remove_missing=remove_missing, executor=executor,
                                                ray_address=ray_address, ray_resources=ray_resources,
                                                max_reject_fraction=max_reject_fraction))
    cfg = load_config(PretokenizeConfig, config, **merge(keys, named))
    return run_pretokenize(cfg)


def decode_images(
    *,
    config: str | Path | None = None,
    input: str | list[str] | None = None,
    output: str | None = None,
    source: str | None = None,
    size: int | tuple[int, int] | None = None,
    resize: str | None = None,
    interpolation: str | None = None,
    channels: int | None = None,
    encode: str | None = None,
    quality: int | None = None,
    keep_original: bool | None = None,
    path_column: str | None = None,
    label_column: str | None = None,
    image_column: str | None = None,
    overwrite: bool | None = None,
    append: bool | None = None,
    update: bool | None = None,
    remove_missing: bool | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    ray_resources: dict[str, float] | None = None,
    max_reject_fraction: float | None = None,
    **keys: Any,
) -> dict[str, Any]:
    """Decodes and resizes images into a Lance table (``prep decode-images``).

    Without ``config``, ``input`` and ``output`` are enough (an ImageFolder tree or a manifest,
    224x224 RGB); with it, each argument given overrides the file's key.

    Args:
        config: a YAML recipe (see ``configs/imagefolder.yaml``); optional.
        input: an ImageFolder root, a manifest, WebDataset shards or Parquet files.
        output: the Lance table to write.
        source: ``"auto"`` (default), ``"imagefolder"``, ``"manifest"``, ``"webdataset"`` or ``"parquet"``.
        size: output side (square) or ``(height, width)`` (default 224).
        resize: ``"crop"`` (default: scale the shorter side, center-crop) or ``"pad"``.
        interpolation: ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"`` or ``"nearest-exact"``.
        channels: 3 (RGB, default) or 1 (grayscale).
        encode: ``"none"`` (default), ``"jpeg"`` or ``"webp"``: also store the resized image re-encoded.
        quality: JPEG/WebP quality 1-100 (default 90).
        keep_original: keep the source bytes as a Lance blob column.
        path_column, label_column, image_column: the columns of a manifest or Parquet input.
        overwrite, append, update, remove_missing, executor, ray_address, ray_resources, max_reject_fraction: as for :func:`pretokenize`.
        **keys: any other key of :class:`prep.prepare.images.config.ImagesConfig`.

    Returns:
        The summary ``prep decode-images --json`` prints.

    Raises:
        PrepError: a missing, unknown or mistyped argument, a missing input, an output prep may not replace.
    """
    from prep.runtime.config import load_config, merge
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import run_decode_images

    named = dict(source=source, size=size, resize=resize, interpolation=interpolation, channels=channels, encode=encode,
                 quality=quality, keep_original=keep_original, path_column=path_column, label_column=label_column,
                 image_column=image_column, **_job_keys(input=input, output=output, overwrite=overwrite, append=append,
                                                       update=update, remove_missing=remove_missing, executor=executor, ray_address=ray_address,
                                                       ray_resources=ray_resources,
                                                       max_reject_fraction=max_reject_fraction))
    cfg = load_config(ImagesConfig, config, **merge(keys, named))
    return run_decode_images(cfg)
