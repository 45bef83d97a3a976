"""Platform messages of a result (checks, errors) in every locale.

Exercise-specific diagnoses are written by authors in the lesson files; these are the
messages every grader shares.
"""

from gradlab.config import DEFAULT_LOCALE

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "error.output_limit": (
            "Your code wrote more than {limit} MB into the grader's channel. Print less, and "
            "leave the files you did not open alone."
        ),
        "check.batchnorm.note": (
            "For comparison: on a model with BatchNorm, even your correct loop's updates differ "
            "from the full batch by {error}%, because BatchNorm normalises each micro-batch with "
            "its own statistics. The lesson's section on BatchNorm explains why."
        ),
        "check.runs.ok": "Your code ran without errors in every scenario.",
        "check.runs.bad": "Your code did not run to the end.",
        "check.steps.ok": "The optimizer stepped once per accumulation cycle in every scenario.",
        "check.steps.bad": "Scenario {scenario}: {steps} optimizer steps, expected {expected}.",
        "check.gradients.ok": "The gradient of every update matches the full-batch reference.",
        "check.gradients.bad": (
            "Scenario {scenario}: the gradients differ from the full-batch reference "
            "(relative difference {error})."
        ),
        "check.parameters.ok": "The trained parameters match the full-batch reference run.",
        "check.parameters.bad": (
            "Scenario {scenario}: the parameters after training differ from the reference run "
            "(relative difference {error})."
        ),
        "check.microbatches.ok": "The model saw one micro-batch at a time.",
        "check.microbatches.bad": (
            "The model saw batches of {batch_size} examples; the micro-batches hold "
            "{micro_batch_size}."
        ),
        "error.timeout": (
            "Your code did not finish within {limit:g} seconds. Look for a loop that never ends."
        ),
        "error.memory_limit": "Your code used more memory than the {limit} MB it may use.",
        "error.no_observations": (
            "Your script ended the process before grading could finish "
            "(for example with os._exit or by closing files it did not open)."
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
        "check.batchnorm.note": (
            "Para comparar: en un modelo con BatchNorm, incluso las actualizaciones de tu bucle "
            "correcto difieren del lote completo en un {error} %, porque BatchNorm normaliza cada "
            "micro-batch con sus propias estadísticas. La sección sobre BatchNorm explica por qué."
        ),
        "check.runs.ok": "Tu código se ejecutó sin errores en todos los escenarios.",
        "check.runs.bad": "Tu código no llegó a ejecutarse hasta el final.",
        "check.steps.ok": (
            "El optimizador dio un paso por ciclo de acumulación en todos los escenarios."
        ),
        "check.steps.bad": (
            "Escenario {scenario}: {steps} pasos del optimizador; se esperaban {expected}."
        ),
        "check.gradients.ok": (
            "El gradiente de cada actualización coincide con la referencia del lote completo."
        ),
        "check.gradients.bad": (
            "Escenario {scenario}: los gradientes difieren de la referencia del lote completo "
            "(diferencia relativa {error})."
        ),
        "check.parameters.ok": (
            "Los parámetros entrenados coinciden con la ejecución de referencia."
        ),
        "check.parameters.bad": (
            "Escenario {scenario}: los parámetros tras el entrenamiento difieren de la "
            "ejecución de referencia (diferencia relativa {error})."
        ),
        "check.microbatches.ok": "El modelo procesó un micro-batch cada vez.",
        "check.microbatches.bad": (
            "El modelo recibió lotes de {batch_size} ejemplos, pero los micro-batches tienen "
            "{micro_batch_size}."
        ),
        "error.timeout": (
            "Tu código no terminó en {limit:g} segundos. Busca un bucle que nunca acaba."
        ),
        "error.memory_limit": "Tu código usó más memoria de los {limit} MB permitidos.",
        "error.no_observations": (
            "Tu script terminó el proceso antes de que pudiéramos corregirlo "
            "(por ejemplo con os._exit o cerrando archivos que no abrió)."
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
        "check.batchnorm.note": (
            "Zum Vergleich: Bei einem Modell mit BatchNorm weichen selbst die Updates deiner "
            "korrekten Schleife um {error} % vom Full Batch ab, weil BatchNorm jeden "
            "Micro-Batch mit seinen eigenen Statistiken normalisiert. Der Abschnitt zu BatchNorm "
            "erklärt, warum."
        ),
        "check.runs.ok": "Dein Code lief in jedem Szenario ohne Fehler.",
        "check.runs.bad": "Dein Code lief nicht bis zum Ende.",
        "check.steps.ok": "Der Optimizer hat in jedem Szenario einmal pro Akkumulationszyklus "
        "einen Schritt gemacht.",
        "check.steps.bad": (
            "Szenario {scenario}: {steps} Optimizer-Schritte, erwartet waren {expected}."
        ),
        "check.gradients.ok": (
            "Der Gradient jedes Updates stimmt mit der Full-Batch-Referenz überein."
        ),
        "check.gradients.bad": (
            "Szenario {scenario}: Die Gradienten weichen von der Full-Batch-Referenz ab "
            "(relativer Unterschied {error})."
        ),
        "check.parameters.ok": "Die trainierten Parameter stimmen mit dem Referenzlauf überein.",
        "check.parameters.bad": (
            "Szenario {scenario}: Die Parameter nach dem Training weichen vom Referenzlauf ab "
            "(relativer Unterschied {error})."
        ),
        "check.microbatches.ok": "Das Modell hat immer nur einen Micro-Batch gesehen.",
        "check.microbatches.bad": (
            "Das Modell hat Batches mit {batch_size} Beispielen gesehen, die Micro-Batches "
            "haben aber {micro_batch_size}."
        ),
        "error.timeout": (
            "Dein Code ist nicht innerhalb von {limit:g} Sekunden fertig geworden. "
            "Such nach einer Schleife, die nie endet."
        ),
        "error.memory_limit": "Dein Code hat mehr als die erlaubten {limit} MB Speicher belegt.",
        "error.no_observations": (
            "Dein Skript hat den Prozess beendet, bevor die Bewertung fertig war "
            "(zum Beispiel mit os._exit oder durch Schließen fremder Dateien)."
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
        "check.batchnorm.note": (
            "Karşılaştırma için: BatchNorm içeren bir modelde doğru döngünün güncellemeleri bile "
            "tam batch'ten %{error} farklı, çünkü BatchNorm her mikro batch'i kendi "
            "istatistikleriyle normalleştirir. Nedenini dersin BatchNorm bölümü anlatıyor."
        ),
        "check.runs.ok": "Kodun tüm senaryolarda hatasız çalıştı.",
        "check.runs.bad": "Kodun sonuna kadar çalışmadı.",
        "check.steps.ok": "Optimizer her senaryoda biriktirme döngüsü başına bir adım attı.",
        "check.steps.bad": (
            "Senaryo {scenario}: {steps} optimizer adımı atıldı, {expected} bekleniyordu."
        ),
        "check.gradients.ok": "Her güncellemenin gradyanı tam batch referansıyla örtüşüyor.",
        "check.gradients.bad": (
            "Senaryo {scenario}: gradyanlar tam batch referansından farklı (göreli fark {error})."
        ),
        "check.parameters.ok": "Eğitilen parametreler referans çalıştırmayla örtüşüyor.",
        "check.parameters.bad": (
            "Senaryo {scenario}: eğitimden sonraki parametreler referans çalıştırmadan farklı "
            "(göreli fark {error})."
        ),
        "check.microbatches.ok": "Model her seferinde tek bir mikro batch gördü.",
        "check.microbatches.bad": (
            "Model {batch_size} örneklik batch'ler gördü, oysa mikro batch'lerde "
            "{micro_batch_size} örnek var."
        ),
        "error.timeout": (
            "Kodun {limit:g} saniye içinde bitmedi. Hiç bitmeyen bir döngü olup olmadığına bak."
        ),
        "error.memory_limit": "Kodun izin verilen {limit} MB'tan fazla bellek kullandı.",
        "error.no_observations": (
            "Betiğin, değerlendirme bitmeden süreci sonlandırdı "
            "(örneğin os._exit ile ya da kendi açmadığı dosyaları kapatarak)."
        ),
        "error.internal": (
            "Değerlendirme sırasında bizim tarafımızda bir sorun oluştu. Bu, kodunun hatası "
            "değil: birazdan yeniden gönder."
        ),
    },
}


def message(locale: str, key: str, **values: object) -> str:
    """The message in `locale` (English when missing there), with values filled in."""
    template = MESSAGES.get(locale, {}).get(key) or MESSAGES[DEFAULT_LOCALE][key]
    return template.format(**values)
