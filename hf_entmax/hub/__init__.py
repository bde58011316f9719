"""The Hub side: Marian → AdaptiveEntmaxMarian conversion, Hub-ready folders, model cards, publishing to the Hub."""

from ..common.model_folder import find_pickle_files
from .convert import ConversionReport, convert_marian
from .export import export_hub_folder
from .load_check import check_folder_loads
from .model_card import (
    ModelCardInfo,
    TranslationScores,
    render_model_card,
    write_training_card,
)
from .push import push_folder


__all__ = [
    "ConversionReport",
    "ModelCardInfo",
    "TranslationScores",
    "check_folder_loads",
    "convert_marian",
    "export_hub_folder",
    "find_pickle_files",
    "push_folder",
    "render_model_card",
    "write_training_card",
]
