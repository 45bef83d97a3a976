"""Platform messages of a result (checks, errors) in every locale, and how any message of a
result is filled in.

Exercise-specific checks and diagnoses are written by authors in the lesson files; these are the
messages every grader shares. The worker writes them in the submission's locale; the web renders
them again in the page's (gradlab/result_text.py), so both sides read them from here.
"""

import math
from collections.abc import Callable, Mapping

from babel.numbers import format_decimal

from gradlab.config import DEFAULT_LOCALE

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "error.output_limit": (
            "Your code wrote more than {limit} MB into the grader's channel. Print less, and "
            "leave the files you did not open alone."
        ),
        "check.runs.ok": "Your code ran without errors in every scenario.",
        "check.runs.bad": "Your code did not run to the end.",
        "error.timeout": (
            "Your code did not finish within {limit} seconds. Look for a loop that never ends."
        ),
        "error.memory_limit": "Your code used more memory than the {limit} MB it may use.",
        "error.no_observations": (
            "Your script ended the process before grading could finish "
            "(for example with os._exit or by closing files it did not open)."
        ),
        "error.bad_observations": (
            "Your script changed what the grader records while it runs (its hooks, its records "
            "or its channels), so it could not be graded. Train with the names you are given, "
            "and leave the grader's own objects alone."
        ),
        "error.internal": (
            "Something went wrong on our side while grading. It is not your code's fault: "
            "please submit again in a moment."
        ),
    },
    "es": {
        "error.output_limit": (
            "Tu código escribió más de {limit} MB en el canal del corrector. Imprime menos y no "
            "toques archivos que no hayas abierto tú."
        ),
        "check.runs.ok": "Tu código se ejecutó sin errores en todos los escenarios.",
        "check.runs.bad": "Tu código no llegó a ejecutarse hasta el final.",
        "error.timeout": (
            "Tu código no terminó en {limit} segundos. Busca un bucle que nunca acaba."
        ),
        "error.memory_limit": "Tu código usó más memoria de los {limit} MB permitidos.",
        "error.no_observations": (
            "Tu script terminó el proceso antes de que pudiéramos corregirlo "
            "(por ejemplo con os._exit o cerrando archivos que no abrió)."
        ),
        "error.bad_observations": (
            "Tu script alteró lo que el corrector registra mientras se ejecuta (sus hooks, sus "
            "registros o sus canales), así que no se ha podido corregir. Entrena con los nombres "
            "que se te dan y no toques los objetos del corrector."
        ),
        "error.internal": (
            "Algo falló por nuestra parte al corregir. No es culpa de tu código: "
            "vuelve a enviarlo en un momento."
        ),
    },
    "de": {
        "error.output_limit": (
            "Dein Code hat mehr als {limit} MB in den Kanal des Bewerters geschrieben. Gib "
            "weniger aus und lass Dateien in Ruhe, die du nicht selbst geöffnet hast."
        ),
        "check.runs.ok": "Dein Code lief in jedem Szenario ohne Fehler.",
        "check.runs.bad": "Dein Code lief nicht bis zum Ende.",
        "error.timeout": (
            "Dein Code ist nicht innerhalb von {limit} Sekunden fertig geworden. "
            "Such nach einer Schleife, die nie endet."
        ),
        "error.memory_limit": "Dein Code hat mehr als die erlaubten {limit} MB Speicher belegt.",
        "error.no_observations": (
            "Dein Skript hat den Prozess beendet, bevor die Bewertung fertig war "
            "(zum Beispiel mit os._exit oder durch Schließen fremder Dateien)."
        ),
        "error.bad_observations": (
            "Dein Skript hat verändert, was der Bewerter während des Laufs aufzeichnet (seine "
            "Hooks, Aufzeichnungen oder Kanäle), deshalb konnte es nicht bewertet werden. "
            "Trainiere mit den Namen, die du bekommst, und lass die Objekte des Bewerters in Ruhe."
        ),
        "error.internal": (
            "Bei der Bewertung ist auf unserer Seite etwas schiefgegangen. Das liegt nicht an "
            "deinem Code: Reiche ihn gleich noch einmal ein."
        ),
    },
    "tr": {
        "error.output_limit": (
            "Kodun, değerlendiricinin kanalına {limit} MB'tan fazla veri yazdı. Daha az çıktı "
            "üret ve kendi açmadığın dosyalara dokunma."
        ),
        "check.runs.ok": "Kodun tüm senaryolarda hatasız çalıştı.",
        "check.runs.bad": "Kodun sonuna kadar çalışmadı.",
        "error.timeout": (
            "Kodun {limit} saniye içinde bitmedi. Hiç bitmeyen bir döngü olup olmadığına bak."
        ),
        "error.memory_limit": "Kodun izin verilen {limit} MB'tan fazla bellek kullandı.",
        "error.no_observations": (
            "Betiğin, değerlendirme bitmeden süreci sonlandırdı "
            "(örneğin os._exit ile ya da kendi açmadığı dosyaları kapatarak)."
        ),
        "error.bad_observations": (
            "Betiğin, değerlendiricinin çalışma sırasında kaydettiklerini (hook'larını, "
            "kayıtlarını ya da kanallarını) değiştirdi; bu yüzden değerlendirilemedi. Eğitim için "
            "sana verilen adları kullan, değerlendiricinin kendi nesnelerine dokunma."
        ),
        "error.internal": (
            "Değerlendirme sırasında bizim tarafımızda bir sorun oluştu. Bu, kodunun hatası "
            "değil: birazdan yeniden gönder."
        ),
    },
}


def platform_template(locale: str, key: str) -> str | None:
    """The platform message `key` in `locale` (English when missing there); None if unknown."""
    return MESSAGES.get(locale, {}).get(key) or MESSAGES[DEFAULT_LOCALE].get(key)


def plain_number(value: float, locale: str) -> str:
    """A platform figure (a limit in seconds) as the locale writes it: "7.5", "7,5", "15"."""
    return format_decimal(value, locale=locale) if math.isfinite(value) else "∞"


def fill(
    template: str,
    values: Mapping[str, object],
    locale: str,
    number: Callable[[float, str], str] = plain_number,
) -> str | None:
    """`template` (always one of ours: a catalog's or a lesson file's, never a result's) with
    `values` filled in as data, floats in the locale's number format; None when they do not fit
    (a placeholder without a value, a format a value cannot take)."""
    localized = {
        name: number(value, locale) if isinstance(value, float) else value
        for name, value in values.items()
    }
    try:
        return template.format(**localized)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return None


def message(locale: str, key: str, **values: object) -> str:
    """The message in `locale` (English when missing there), with values filled in."""
    template = platform_template(locale, key)
    if template is None:
        raise KeyError(f"no platform message {key!r}")
    text = fill(template, values, locale)
    if text is None:
        raise ValueError(f"platform message {key!r} does not take {sorted(values)}")
    return text
